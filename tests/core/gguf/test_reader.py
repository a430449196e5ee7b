"""The validated GGUF reader: every damaged header an adversary can write ends in a ModelFileError that
says what is wrong, never another exception (and never a GGUFInfo llama.cpp could not load)."""

from __future__ import annotations

import os
import pathlib

import pytest

from app.core.errors import ModelFileError, QuickdraftError
from app.core.gguf import reader as g
from app.core.gguf.info import read_gguf_info
from tests.core.gguf.craft import Crafted, Tensor


def _read(tmp_path, crafted: Crafted, name: str = "crafted.gguf"):
    return read_gguf_info(crafted.write(tmp_path / name))


def test_a_crafted_file_reads(tmp_path):
    info = _read(tmp_path, Crafted())
    assert (info.architecture, info.name, info.vocab_size, info.parameter_count) == ("llama", "crafted", 4, 4)
    assert info.quantization == "F32"


def test_llama_cpp_versions_2_and_3_read(tmp_path):
    for version in (2, 3):
        assert _read(tmp_path, Crafted(version=version), f"v{version}.gguf").architecture == "llama"


@pytest.mark.parametrize("crafted, message", [
    (Crafted(version=99), "version 99, but llama.cpp reads versions 2 and 3 only"),
    (Crafted(version=1), "version 1, which llama.cpp no longer reads"),
    (Crafted(version=0x03000000), "big-endian"),
    (Crafted(tensors=[Tensor(type=200)]), "unknown tensor type 200"),
    (Crafted(tensors=[Tensor(type=4)]), "unknown tensor type 4"),            # Q4_2: removed from ggml
    (Crafted().set("general.alignment", g.UINT32, 0), "alignment is 0, which is not a power of 2"),
    (Crafted().set("general.alignment", g.UINT32, 48), "not a power of 2"),
    (Crafted().set("general.alignment", g.STRING, "32"), "alignment must be a uint32 but is a string"),
    (Crafted().set("x.nested", g.ARRAY, (g.ARRAY, [])), "nested arrays"),
    (Crafted().set("tokenizer.ggml.tokens", g.UINT32, 7), "'tokenizer.ggml.tokens' should be an array of strings"),
    (Crafted().set("tokenizer.ggml.tokens", g.ARRAY, (g.INT32, [1, 2])), "should be an array of strings but is an array of int32"),
    (Crafted().set("general.architecture", g.UINT32, 1), "'general.architecture' should be a string but is a uint32"),
    (Crafted().set("general.name", g.ARRAY, (g.STRING, ["a"])), "'general.name' should be a string"),
    (Crafted().set("llama.context_length", g.STRING, "4096"), "should be an integer but is a string"),
    (Crafted().set("llama.block_count", g.INT32, -1), "'llama.block_count' is negative"),
    (Crafted().set("general.file_type", g.FLOAT32, 1.0), "'general.file_type' should be an integer"),
    (Crafted().set("tokenizer.ggml.add_bos_token", g.STRING, "yes"), "should be a bool"),
    (Crafted().set("tokenizer.chat_template", g.UINT8, 1), "'tokenizer.chat_template' should be a string"),
    (Crafted(kv=[("general.name", g.STRING, "x")]), "names no architecture"),
    (Crafted(kv=[("general.architecture", g.STRING, "llama")] * 2), "'general.architecture' appears twice"),
    (Crafted(tensors=[Tensor(), Tensor(offset=32)]), "'w.weight' appears twice"),
    (Crafted(tensors=[Tensor(name="x" * 64)]), "longer than 63 bytes"),
    (Crafted(tensors=[Tensor(dims=(1, 1, 1, 1, 1))]), "5 dimensions"),
    (Crafted(tensors=[Tensor(dims=(2**63 + 5,))]), "negative dimension"),
    (Crafted(tensors=[Tensor(dims=(2**62, 2**62))]), "more elements than llama.cpp can address"),
    (Crafted(tensors=[Tensor(dims=(2**31, 2**31))]), "truncated"),          # fits int64, not the file
    (Crafted(tensors=[Tensor(dims=(10,), type=2)]), "rows of 10 elements, not a multiple of its block size 32"),
    (Crafted(tensors=[Tensor(), Tensor(name="b", offset=16)]), "'b' starts at offset 16 instead of 32"),
])
def test_damaged_headers_are_refused_with_the_reason(tmp_path, crafted, message):
    with pytest.raises(ModelFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _read(tmp_path, crafted)


def test_a_value_of_unknown_type_is_refused(tmp_path):
    data = bytearray(Crafted().set("x.odd", g.UINT8, 0).to_bytes())
    at = data.index(b"x.odd") + len(b"x.odd")
    data[at:at + 4] = (13).to_bytes(4, "little")      # the value's type: 13 does not exist
    (tmp_path / "odd.gguf").write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="unknown value type 13"):
        read_gguf_info(tmp_path / "odd.gguf")


@pytest.mark.parametrize("patch, message", [
    (lambda d: d[:8] + (2**63 + 1).to_bytes(8, "little") + d[16:], "number of tensors .* is impossible"),
    (lambda d: d[:24] + (2**40).to_bytes(8, "little") + d[32:], "ends inside a metadata key"),
])
def test_absurd_counts_and_lengths_are_refused_at_once(tmp_path, patch, message):
    (tmp_path / "x.gguf").write_bytes(patch(Crafted().to_bytes()))
    with pytest.raises(ModelFileError, match=message):
        read_gguf_info(tmp_path / "x.gguf")


def test_a_string_array_longer_than_the_file_is_refused_without_reading_it(tmp_path):
    data = bytearray(Crafted().to_bytes())
    at = data.index(b"tokenizer.ggml.tokens") + len(b"tokenizer.ggml.tokens") + 8   # type, item type
    data[at:at + 8] = (2**40).to_bytes(8, "little")
    (tmp_path / "x.gguf").write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="claims 1,099,511,627,776 strings"):
        read_gguf_info(tmp_path / "x.gguf")


def test_unreadable_paths_are_model_file_errors(tmp_path, monkeypatch):
    (tmp_path / "dir.gguf").mkdir()
    with pytest.raises(ModelFileError, match="Not a file"):
        read_gguf_info(tmp_path / "dir.gguf")
    os.symlink(tmp_path / "loop.gguf", tmp_path / "loop.gguf")
    with pytest.raises(ModelFileError):
        read_gguf_info(tmp_path / "loop.gguf")
    with pytest.raises(ModelFileError):
        read_gguf_info(str(tmp_path / "nul\0.gguf"))
    locked = Crafted().write(tmp_path / "locked.gguf")

    def refuse(self, *args, **kwargs):   # root reads files whatever their mode: refuse as a plain user's open would
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(pathlib.Path, "open", refuse)
    with pytest.raises(ModelFileError, match="locked.gguf cannot be read: Permission denied"):
        read_gguf_info(locked)


def test_every_error_is_a_quickdraft_error():
    assert issubclass(ModelFileError, QuickdraftError)
