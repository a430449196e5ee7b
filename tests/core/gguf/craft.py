"""Hand-made GGUF bytes for the reader's tests: any header field can be set to a wrong value."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from app.core.gguf import reader as g

_FORMATS = {g.UINT8: "<B", g.INT8: "<b", g.UINT16: "<H", g.INT16: "<h", g.UINT32: "<I", g.INT32: "<i",
            g.FLOAT32: "<f", g.BOOL: "<B", g.UINT64: "<Q", g.INT64: "<q", g.FLOAT64: "<d"}


def string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def value(vtype: int, v) -> bytes:
    """The bytes of a value of GGUF type ``vtype``; an array is (item_type, [items])."""
    if vtype == g.STRING:
        return string(v)
    if vtype == g.ARRAY:
        item_type, items = v
        return struct.pack("<IQ", item_type, len(items)) + b"".join(value(item_type, x) for x in items)
    return struct.pack(_FORMATS[vtype], v)


@dataclass
class Tensor:
    name: str = "w.weight"
    dims: tuple[int, ...] = (4,)
    type: int = 0
    offset: int = 0


@dataclass
class Crafted:
    version: int = 3
    kv: list[tuple[str, int, object]] = field(default_factory=lambda: [
        ("general.architecture", g.STRING, "llama"),
        ("general.name", g.STRING, "crafted"),
        ("tokenizer.ggml.model", g.STRING, "llama"),
        ("tokenizer.ggml.tokens", g.ARRAY, (g.STRING, ["<unk>", "<s>", "</s>", "a"])),
    ])
    tensors: list[Tensor] = field(default_factory=lambda: [Tensor()])
    alignment: int = 32
    data: bytes | None = None        # None: zeros, as many as the tensors need

    def set(self, key: str, vtype: int, v) -> "Crafted":
        self.kv = [item for item in self.kv if item[0] != key] + [(key, vtype, v)]
        return self

    def to_bytes(self) -> bytes:
        head = b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv))
        head += b"".join(string(k) + struct.pack("<I", t) + value(t, v) for k, t, v in self.kv)
        for t in self.tensors:
            head += string(t.name) + struct.pack("<I", len(t.dims))
            head += b"".join(struct.pack("<Q", d) for d in t.dims) + struct.pack("<IQ", t.type, t.offset)
        head += b"\0" * (-len(head) % self.alignment)
        return head + (self.data if self.data is not None else b"\0" * self._data_size())

    def _data_size(self) -> int:
        size = 0
        for t in self.tensors:
            _, block, type_size = g.TENSOR_TYPES.get(t.type, ("?", 1, 4))
            n = 1
            for d in t.dims:
                n *= d
            size = max(size, t.offset + n // block * type_size)
        return min(size, 1 << 20)

    def write(self, path) -> "Path":  # noqa: F821
        path.write_bytes(self.to_bytes())
        return path


def tiny_with(path, spec, overrides: dict):
    """A tiny model (app.core.gguf.tiny) with metadata keys set to ``overrides``: an int as uint32, a
    list as an array of uint32, a str as a string (its tensors stay those of ``spec``)."""
    import gguf

    from app.core.gguf.tiny import write_tiny_model

    original = gguf.GGUFWriter.write_header_to_file

    def with_overrides(writer, *args, **kwargs):
        for key, v in overrides.items():
            writer.kv_data[0][key] = gguf.GGUFValue(v, gguf.GGUFValueType.STRING) if isinstance(v, str) else \
                gguf.GGUFValue(v, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT32) if isinstance(v, list) else \
                gguf.GGUFValue(v, gguf.GGUFValueType.UINT32)
        return original(writer, *args, **kwargs)

    gguf.GGUFWriter.write_header_to_file = with_overrides
    try:
        return write_tiny_model(path, spec)
    finally:
        gguf.GGUFWriter.write_header_to_file = original
