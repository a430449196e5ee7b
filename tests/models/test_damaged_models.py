"""One damaged GGUF in the models folder is listed with its reason; it breaks neither the list, nor the
pairing, nor the CLI; import refuses what llama.cpp could not load."""

from __future__ import annotations

import pathlib

import pytest

from app.cli import main as quickdraft
from app.core.errors import ModelFileError
from app.core.gguf import reader as g
from app.core.gguf.tiny import write_tiny_model
from app.models.registry import ModelRegistry
from tests.core.gguf.craft import Crafted, Tensor

DAMAGED = {
    "v99.gguf": Crafted(version=99),
    "unknown-tensor-type.gguf": Crafted(tensors=[Tensor(type=200)]),
    "alignment-0.gguf": Crafted().set("general.alignment", g.UINT32, 0),
    "nested-arrays.gguf": Crafted().set("x.nested", g.ARRAY, (g.ARRAY, [])),
    "wrongly-typed-key.gguf": Crafted().set("tokenizer.ggml.tokens", g.UINT32, 7),
    "huge-tensor.gguf": Crafted(tensors=[Tensor(dims=(2**62, 2**62))]),
}


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def models_dir(data_dir):
    d = data_dir / "models"
    d.mkdir(parents=True)
    write_tiny_model(d / "good.gguf")
    for name, crafted in DAMAGED.items():
        crafted.write(d / name)
    (d / "a-folder.gguf").mkdir()
    return d


def test_the_registry_lists_every_damaged_file_with_its_reason(models_dir):
    by_name = {m.name: m for m in ModelRegistry(models_dir).list()}
    assert by_name["good.gguf"].usable
    for name in DAMAGED:
        assert not by_name[name].usable and by_name[name].error, name
    assert "versions 2 and 3" in by_name["v99.gguf"].error
    assert "unknown tensor type 200" in by_name["unknown-tensor-type.gguf"].error


def test_an_unreadable_file_is_listed_with_its_reason(models_dir, monkeypatch):
    real_open = pathlib.Path.open

    def open_(self, *args, **kwargs):   # root reads files whatever their mode: refuse as for a plain user
        if self.name == "good.gguf":
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", open_)
    (good,) = [m for m in ModelRegistry(models_dir).list() if m.name == "good.gguf"]
    assert not good.usable and "Permission denied" in good.error


def _run(data_dir, capsys, *argv) -> tuple[int, str, str]:
    code = quickdraft(["--data-dir", str(data_dir), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_models_list_and_pairs_survive_damaged_files(models_dir, data_dir, capsys):
    code, out, err = _run(data_dir, capsys, "models", "list")
    assert code == 0, err
    assert "good.gguf" in out and out.count("error:") == len(DAMAGED)
    code, out, err = _run(data_dir, capsys, "models", "pairs", "good.gguf")
    assert code == 0, err
    assert all(name in out for name in DAMAGED)
    code, out, err = _run(data_dir, capsys, "models", "pairs", "v99.gguf")
    assert code == 1 and err.startswith("error: v99.gguf cannot be used") and err.count("\n") == 1


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_import_refuses_what_llama_cpp_cannot_load(tmp_path, data_dir, capsys, name):
    source = DAMAGED[name].write(tmp_path / name)
    with pytest.raises(ModelFileError):
        ModelRegistry(data_dir / "models").import_file(source)
    code, _, err = _run(data_dir, capsys, "models", "import", str(source))
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1
    assert not (data_dir / "models" / "imported" / name).exists()
