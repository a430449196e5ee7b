"""The suffix index's log on disk (app/core/speculation/suffix_store.py): it survives a kill -9 in the
middle of a write, keeps to its size bound, refuses another vocabulary, and is cleared."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from app.core.speculation.suffix_store import (HEADER, LOG_NAME, SuffixStore, VocabularyMismatchError, clear_indexes,
                                               index_key, list_indexes, read_log)

ROOT = Path(__file__).resolve().parents[3]

# appends 5 documents, then is killed by the test inside the sixth append, half of it written
WRITER = textwrap.dedent("""
    import sys, time
    from app.core.speculation import suffix_store

    class HalfWritten:
        def __init__(self, file):
            self.file = file
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.file.close()
        def write(self, data):
            self.file.write(data[:len(data) // 2])
            self.file.flush()
            print("torn", flush=True)
            time.sleep(600)

    store = suffix_store.SuffixStore(sys.argv[1], "fp", "model", 1 << 30)
    store.open()
    for i in range(5):
        store.append([i] * 100)
    suffix_store.open = lambda path, mode: HalfWritten(open(path, mode))   # the module's own open()
    store.append([9] * 1000)
""")


def docs_of(store: SuffixStore) -> list[list[int]]:
    return [doc.tolist() for doc in store.open()]


def test_documents_come_back_after_a_restart(tmp_path):
    store = SuffixStore(tmp_path / "m", "fp", "model", 1 << 20)
    assert store.open() == []
    store.append([1, 2, 3])
    store.append([4])
    assert docs_of(SuffixStore(tmp_path / "m", "fp", "model", 1 << 20)) == [[1, 2, 3], [4]]


def test_a_kill_in_the_middle_of_a_write_loses_that_document_only(tmp_path):
    folder = tmp_path / "m"
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert child.stdout.readline().strip() == "torn"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    complete = 5 * (HEADER.size + 400)
    assert (folder / LOG_NAME).stat().st_size == complete + (HEADER.size + 4000) // 2   # the torn record is there
    store = SuffixStore(folder, "fp", "model", 1 << 30)
    assert docs_of(store) == [[i] * 100 for i in range(5)]
    assert (folder / LOG_NAME).stat().st_size == complete   # cut off where the torn record began
    store.append([7, 7])
    assert docs_of(SuffixStore(folder, "fp", "model", 1 << 30))[-1] == [7, 7]


def test_a_damaged_record_ends_what_is_read(tmp_path):
    store = SuffixStore(tmp_path / "m", "fp", "model", 1 << 20)
    store.open()
    for doc in ([1, 2], [3, 4], [5, 6]):
        store.append(doc)
    data = bytearray(store.log_path.read_bytes())
    data[HEADER.size * 2 + 8 + 2] ^= 0xFF   # a byte of the second record's tokens: its CRC fails
    store.log_path.write_bytes(bytes(data))
    assert docs_of(store) == [[1, 2]]


def test_the_log_keeps_to_its_limit_the_oldest_documents_going_first(tmp_path):
    limit = 1 << 20
    store = SuffixStore(tmp_path / "m", "fp", "model", limit)
    store.open()
    doc_bytes = HEADER.size + 4 * 1000
    for i in range(400):   # 400 documents of 4 kB: about 1.5 limits
        store.append(np.full(1000, i))
        assert store.log_path.stat().st_size <= limit
    kept = docs_of(store)
    assert [doc[0] for doc in kept] == list(range(400 - len(kept), 400))   # the newest, in order
    assert len(kept) * doc_bytes <= limit and len(kept) > 0.7 * limit / doc_bytes


def test_another_vocabularys_index_is_refused_and_never_read(tmp_path):
    store = SuffixStore(tmp_path / "m", "fp-a", "model A", 1 << 20)
    store.open()
    store.append([1, 2, 3])
    with pytest.raises(VocabularyMismatchError, match="model A with another vocabulary"):
        SuffixStore(tmp_path / "m", "fp-b", "model B", 1 << 20).open()
    assert read_log(tmp_path / "m" / LOG_NAME)[0][0].tolist() == [1, 2, 3]   # still there, untouched
    assert list_indexes(tmp_path, "fp-b")[0].problem.startswith("another vocabulary")


def test_status_and_clear(tmp_path):
    for name, docs in (("a", [[1, 2], [3]]), ("b", [[4, 5, 6]])):
        store = SuffixStore(tmp_path / name, "fp", name, 1 << 20)
        store.open()
        for doc in docs:
            store.append(doc)
    status = {s.key: s for s in list_indexes(tmp_path)}
    assert (status["a"].documents, status["a"].tokens, status["a"].bytes) == (2, 3, 2 * HEADER.size + 12)
    assert status["b"].tokens == 3 and status["b"].problem == ""
    assert clear_indexes(tmp_path, "a") == 1 and [s.key for s in list_indexes(tmp_path)] == ["b"]
    assert clear_indexes(tmp_path) == 1 and list_indexes(tmp_path) == []


def test_a_models_key_is_its_file_name():
    assert index_key("/models/Qwen2.5-Coder-1.5B-Q4_K_M.gguf") == "Qwen2.5-Coder-1.5B-Q4_K_M"
    assert index_key("C:/x/my model (1).gguf") == "my_model_1"
