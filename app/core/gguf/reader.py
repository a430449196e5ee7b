"""The one validated reader of a GGUF file's header: its metadata and its tensor table.

It checks what llama.cpp's own reader checks (ggml/src/gguf.cpp of the pinned llama-cpp-python):
version 2 or 3, known value types and no nested arrays, no duplicate keys or tensor names, a
power-of-two ``general.alignment`` of type uint32, at most 4 dimensions, dimensions and element
counts within int64, known tensor types with whole blocks per row, and tensors laid out one after
the other. A header that passes is one llama.cpp can parse; any other bytes raise ``GGUFFormatError``
with the reason, never another exception, and reading stops at the end of the buffer, so any
input is read in time proportional to its size.

The ``gguf`` package's GGUFReader builds a numpy view per array element, which takes ~10 s for a
150k-token vocabulary; this reads the same layout in ~0.2 s.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_TENSOR_NAME = 63        # GGML_MAX_NAME - 1
INT64_MAX = 2**63 - 1

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
TYPE_NAMES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array",
              "uint64", "int64", "float64")
INTEGER_TYPES = frozenset({UINT8, INT8, UINT16, INT16, UINT32, INT32, UINT64, INT64})
_SCALAR_DTYPES = {UINT8: "<u1", INT8: "<i1", UINT16: "<u2", INT16: "<i2", UINT32: "<u4", INT32: "<i4",
                  FLOAT32: "<f4", BOOL: "<u1", UINT64: "<u8", INT64: "<i8", FLOAT64: "<f8"}

# ggml's tensor types: id -> (name, elements per block, bytes per block); gaps are removed types
TENSOR_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8),
    28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
    42: ("Q2_0", 64, 18),
}


class GGUFFormatError(Exception):
    """The bytes are not a GGUF header llama.cpp can read; the message says why, for a person."""


@dataclass(frozen=True)
class Field:
    """One metadata value and its GGUF type; ``item_type`` is set for arrays. Numeric arrays are
    numpy arrays, string arrays lists of str."""

    type: int
    value: object
    item_type: int | None = None

    def describe_type(self) -> str:
        return f"an array of {TYPE_NAMES[self.item_type]}" if self.type == ARRAY else f"a {TYPE_NAMES[self.type]}"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: int
    shape: tuple[int, ...]
    offset: int             # from the start of the data section
    n_elements: int
    n_bytes: int

    @property
    def type_name(self) -> str:
        return TENSOR_TYPES[self.type][0]


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    fields: dict[str, Field]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_start: int         # where the tensor data begins in the file

    @property
    def data_end(self) -> int:
        """The byte after the last tensor's data: the least size the whole file must have."""
        return self.data_start + max((t.offset + t.n_bytes for t in self.tensors), default=0)


def read_header(buf) -> GGUFHeader:
    """Parse and validate the header in ``buf`` (bytes or an mmap), which starts with b"GGUF"."""
    return _Parser(buf).header()


class _Parser:
    def __init__(self, buf):
        self.buf = buf
        self.size = len(buf)
        self.pos = 0

    def header(self) -> GGUFHeader:
        if self._take(4) != b"GGUF":
            raise GGUFFormatError("it does not start with 'GGUF'")
        version = self._version()
        n_tensors = self._count("tensors")
        n_kv = self._count("metadata entries")
        fields = self._fields(n_kv)
        alignment = _alignment(fields)
        tensors = tuple(self._tensor_table(n_tensors))
        data_start = _pad(self.pos, alignment) if tensors else self.pos
        _check_layout(tensors, alignment)
        return GGUFHeader(version, fields, tensors, alignment, data_start)

    # --- header fields -------------------------------------------------------------------------

    def _version(self) -> int:
        version = self._unpack("<I")
        if version in SUPPORTED_VERSIONS:
            return version
        if version and version & 0xFFFF == 0:
            raise GGUFFormatError(f"its GGUF version number ({version}) looks byte-swapped: it was written "
                                  f"for a big-endian machine")
        if version == 1:
            raise GGUFFormatError("it is GGUF version 1, which llama.cpp no longer reads; convert it again")
        raise GGUFFormatError(f"it is GGUF version {version}, but llama.cpp reads versions 2 and 3 only")

    def _count(self, what: str) -> int:
        n = self._unpack("<Q")
        if n > INT64_MAX:
            raise GGUFFormatError(f"its number of {what} ({n}) is impossible")
        return n

    def _fields(self, n_kv: int) -> dict[str, Field]:
        fields: dict[str, Field] = {}
        for _ in range(n_kv):
            key = self._string("a metadata key")
            if key in fields:
                raise GGUFFormatError(f"the metadata key '{key}' appears twice")
            fields[key] = self._field(key)
        return fields

    def _field(self, key: str) -> Field:
        vtype = self._unpack("<I")
        if vtype == ARRAY:
            item_type, n = self._unpack("<I"), self._unpack("<Q")
            if item_type == ARRAY:
                raise GGUFFormatError(f"the metadata key '{key}' holds nested arrays, which GGUF does not allow")
            return Field(ARRAY, self._array(key, item_type, n), item_type)
        if vtype == STRING:
            return Field(STRING, self._string(f"the value of '{key}'"))
        _check_value_type(key, vtype)
        value = self._array(key, vtype, 1)[0].item()
        return Field(vtype, bool(value) if vtype == BOOL else value)

    def _array(self, key: str, item_type: int, n: int):
        if item_type == STRING:
            if n * 8 > self.size - self.pos:   # each string takes 8 bytes at least: refuse at once
                raise GGUFFormatError(f"the array '{key}' claims {n:,} strings, more than the file can hold")
            return [self._string(f"an item of '{key}'") for _ in range(n)]
        _check_value_type(key, item_type)
        dtype = np.dtype(_SCALAR_DTYPES[item_type])
        return np.frombuffer(self._take(n * dtype.itemsize, f"the array '{key}'"), dtype=dtype)

    # --- tensors -----------------------------------------------------------------------------------

    def _tensor_table(self, n_tensors: int):
        seen: set[str] = set()
        for _ in range(n_tensors):
            raw = self._bytes("a tensor name")
            name = raw.decode("utf-8", "replace")
            if len(raw) > MAX_TENSOR_NAME:
                raise GGUFFormatError(f"the tensor name '{name[:80]}' is longer than {MAX_TENSOR_NAME} bytes")
            if name in seen:
                raise GGUFFormatError(f"the tensor '{name}' appears twice")
            seen.add(name)
            n_dims = self._unpack("<I")
            if n_dims > MAX_DIMS:
                raise GGUFFormatError(f"the tensor '{name}' has {n_dims} dimensions; at most {MAX_DIMS} are allowed")
            shape = tuple(self._unpack("<Q") for _ in range(n_dims))
            ttype, offset = self._unpack("<I"), self._unpack("<Q")
            yield _tensor(name, shape, ttype, offset)

    # --- bytes -------------------------------------------------------------------------------------

    def _take(self, n: int, what: str = "the header") -> bytes:
        if n > self.size - self.pos:
            raise GGUFFormatError(f"it ends inside {what} (truncated or damaged)")
        start, self.pos = self.pos, self.pos + n
        return self.buf[start:self.pos]

    def _unpack(self, fmt: str) -> int:
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def _bytes(self, what: str) -> bytes:
        return self._take(self._unpack("<Q"), what)

    def _string(self, what: str) -> str:
        return self._bytes(what).decode("utf-8", "replace")


def _check_value_type(key: str, vtype: int) -> None:
    if vtype not in _SCALAR_DTYPES:
        raise GGUFFormatError(f"the metadata key '{key}' has the unknown value type {vtype}")


def _alignment(fields: dict[str, Field]) -> int:
    field = fields.get("general.alignment")
    if field is None:
        return DEFAULT_ALIGNMENT
    if field.type != UINT32:
        raise GGUFFormatError(f"general.alignment must be a uint32 but is {field.describe_type()}")
    alignment = int(field.value)
    if alignment <= 0 or alignment & (alignment - 1):
        raise GGUFFormatError(f"general.alignment is {alignment}, which is not a power of 2")
    return alignment


def _tensor(name: str, shape: tuple[int, ...], ttype: int, offset: int) -> TensorInfo:
    if ttype not in TENSOR_TYPES:
        raise GGUFFormatError(f"the tensor '{name}' has the unknown tensor type {ttype}")
    type_name, block, type_size = TENSOR_TYPES[ttype]
    n_elements = 1
    for dim in shape:
        if dim > INT64_MAX:
            raise GGUFFormatError(f"the tensor '{name}' has a negative dimension")
        n_elements *= dim
    if n_elements > INT64_MAX:
        raise GGUFFormatError(f"the tensor '{name}' has more elements than llama.cpp can address")
    row = shape[0] if shape else 1
    if row % block:
        raise GGUFFormatError(f"the tensor '{name}' of type {type_name} has rows of {row} elements, "
                              f"not a multiple of its block size {block}")
    return TensorInfo(name, ttype, shape, offset, n_elements, n_elements // block * type_size)


def _check_layout(tensors: tuple[TensorInfo, ...], alignment: int) -> None:
    """llama.cpp requires each tensor's data right after the previous one's, padded to the alignment."""
    expected = 0
    for tensor in tensors:
        if tensor.offset != expected:
            raise GGUFFormatError(f"the tensor '{tensor.name}' starts at offset {tensor.offset} instead of "
                                  f"{expected}")
        expected += _pad(tensor.n_bytes, alignment)


def _pad(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment
