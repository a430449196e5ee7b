"""Property: any bytes given to the GGUF reader give a GGUFInfo or a QuickdraftError, within a time
bound; never KeyError, RecursionError, OverflowError, MemoryError or any other exception."""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.errors import QuickdraftError
from app.core.gguf.info import GGUFInfo, read_gguf_info
from app.core.gguf.tiny import TinySpec, write_tiny_model

TIME_BOUND_S = 2.0
_names = itertools.count()
_FUZZ = settings(max_examples=150, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@pytest.fixture(scope="module")
def valid(workdir) -> bytes:
    """A tiny real model: a 270-token vocabulary, a chat template and 20 tensors (~8 KB of header)."""
    return write_tiny_model(workdir / "valid.gguf", TinySpec(n_embd=8, n_head=2, n_head_kv=1, n_ff=16)).read_bytes()


def _check(workdir: Path, data: bytes) -> None:
    path = workdir / f"case{next(_names)}.gguf"   # a new name each time: the reader caches by path
    path.write_bytes(data)
    start = time.perf_counter()
    try:
        result = read_gguf_info(path)
    except QuickdraftError:
        result = None
    finally:
        path.unlink()
    assert time.perf_counter() - start < TIME_BOUND_S
    assert result is None or (isinstance(result, GGUFInfo) and result.parameter_count >= 0
                              and result.vocab_size >= 0)


@_FUZZ
@given(data=st.binary(max_size=512))
def test_any_bytes(workdir, data):
    _check(workdir, data)


@_FUZZ
@given(data=st.binary(max_size=512))
def test_any_bytes_after_the_magic_and_a_version(workdir, data):
    _check(workdir, b"GGUF\x03\x00\x00\x00" + data)


_mutation = st.tuples(st.integers(min_value=0, max_value=12_000), st.integers(min_value=0, max_value=255))
_interesting_bytes = st.sampled_from([0x00, 0x01, 0x07, 0x08, 0x09, 0x0D, 0x20, 0x7F, 0x80, 0xFF])


@_FUZZ
@given(mutations=st.lists(_mutation, min_size=1, max_size=8), cut=st.none() | st.integers(min_value=0))
def test_mutations_of_a_valid_model(workdir, valid, mutations, cut):
    data = bytearray(valid)
    for position, byte in mutations:
        data[position % len(data)] = byte
    _check(workdir, bytes(data[:cut]) if cut is not None else bytes(data))


@_FUZZ
@given(position=st.integers(min_value=4, max_value=12_000), width=st.sampled_from([1, 4, 8]),
       byte=_interesting_bytes)
def test_counts_and_types_set_to_extremes(workdir, valid, position, width, byte):
    """Whole integer fields (a count, a type, a length) set to 0, 1, 7 ... or 0xFF..FF."""
    data = bytearray(valid)
    position %= len(data) - width
    data[position:position + width] = bytes([byte]) * width
    _check(workdir, bytes(data))


# --- headers built field by field: every count, type, length and alignment an adversary may choose -----

_EXTREMES = [0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 31, 32, 48, 63, 64, 256, 2**31, 2**32 - 1, 2**62, 2**63 - 1, 2**63,
             2**64 - 1]
_KEYS = ["general.architecture", "general.name", "general.alignment", "general.file_type", "tokenizer.ggml.model",
         "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token",
         "tokenizer.chat_template", "llama.context_length", "llama.block_count", "llama.attention.head_count"]
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_u32, _u64 = st.sampled_from(_EXTREMES).map(lambda n: n % 2**32), st.sampled_from(_EXTREMES)


def _le(n: int, width: int) -> bytes:
    return (n % 2**(8 * width)).to_bytes(width, "little")


@st.composite
def _value(draw, vtype: int, depth: int = 0) -> bytes:
    if vtype == 8:
        return gguf_string(draw(st.text(max_size=12)).encode("utf-8", "surrogatepass"))
    if vtype == 9:
        item = draw(st.integers(0, 14))
        n = draw(st.integers(0, 3))
        items = b"" if depth > 1 else b"".join(draw(_value(item, depth + 1)) for _ in range(n))
        return _le(item, 4) + _le(draw(st.sampled_from([n, n, 2**40, 2**64 - 1])), 8) + items
    return draw(st.binary(min_size=_SIZES.get(vtype, 4), max_size=_SIZES.get(vtype, 4)))


def gguf_string(raw: bytes) -> bytes:
    return _le(len(raw), 8) + raw


@st.composite
def _headers(draw) -> bytes:
    kv = b""
    n_kv = draw(st.integers(0, 6))
    for _ in range(n_kv):
        vtype = draw(st.integers(0, 14))
        kv += gguf_string(draw(st.sampled_from(_KEYS)).encode()) + _le(vtype, 4) + draw(_value(vtype))
    tensors = b""
    n_tensors = draw(st.integers(0, 4))
    for i in range(n_tensors):
        dims = draw(st.lists(_u64, max_size=5))
        tensors += gguf_string(f"t{i}.weight".encode()) + _le(len(dims), 4) + b"".join(_le(d, 8) for d in dims)
        tensors += _le(draw(st.integers(0, 45)), 4) + _le(draw(_u64), 8)
    counts = b"".join(_le(draw(st.sampled_from([n] * 4 + _EXTREMES)), 8) for n in (n_tensors, n_kv))
    version = draw(st.sampled_from([2, 3, 3, 3, 1, 0, 99, 0x03000000]))
    body = b"GGUF" + _le(version, 4) + counts + kv + tensors
    return body + b"\0" * draw(st.integers(0, 300))


@settings(_FUZZ, max_examples=300)
@given(data=_headers())
def test_headers_built_from_extreme_fields(workdir, data):
    _check(workdir, data)
