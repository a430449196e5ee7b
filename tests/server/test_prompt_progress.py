"""llama-server's return_progress: a stream says how much of its prompt is read, from the cached part
before anything is read, after each chunk, to the whole prompt before the first token."""

from __future__ import annotations

import json

import httpx
import pytest

from app.core.speculation.loop import SHARED_READ_CHUNK

LONG = "the cat is on the mat and the dog is in the house " * 12   # several chunks of a slot's prompt reading


def stream(url: str, path: str, body: dict) -> list[dict]:
    response = httpx.post(url + path, json=body | {"stream": True}, timeout=60)
    assert response.status_code == 200, response.text
    return [json.loads(line[len("data: "):]) for line in response.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def progress_of(chunks: list[dict]) -> list[dict]:
    return [c["prompt_progress"] for c in chunks if "prompt_progress" in c]


def check_progress(progress: list[dict], cached: bool) -> None:
    first, last = progress[0], progress[-1]
    assert first["cache"] == first["processed"] and (first["cache"] > 0) == cached
    assert all(p["total"] == first["total"] and p["cache"] == first["cache"] for p in progress)
    assert all(a["processed"] < b["processed"] for a, b in zip(progress, progress[1:]))
    assert last["processed"] == last["total"]


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}], "max_tokens": 3}),
    ("/completion", {"prompt": LONG, "n_predict": 3}),
])
def test_a_long_prompt_reports_each_chunk_read_then_the_same_prompt_its_cached_part(served, path, body):
    chunks = stream(served.url, path, body | {"return_progress": True, "cache_prompt": False, "id_slot": 0})
    progress = progress_of(chunks)
    check_progress(progress, cached=False)
    assert len(progress) == 1 + -(-progress[0]["total"] // SHARED_READ_CHUNK)   # the start, then each chunk read
    first_text = next(i for i, c in enumerate(chunks) if (c.get("choices") or [{}])[0].get("delta", {}).get("content")
                      or c.get("content"))
    assert all("prompt_progress" not in c for c in chunks[first_text:])   # all of it before the answer
    if path.startswith("/v1/chat"):
        assert all(c["choices"][0]["delta"] == {"role": "assistant", "content": None} for c in chunks if "prompt_progress" in c)
    again = progress_of(stream(served.url, path, body | {"return_progress": True, "cache_prompt": True, "id_slot": 0}))
    check_progress(again, cached=True)
    assert len(again) == 2 and again[0]["cache"] == again[0]["total"] - 1   # the cached prompt: its last token read again


def test_progress_timings_count_only_what_is_read(served):
    chunks = stream(served.url, "/completion", {"prompt": LONG + "!", "n_predict": 2, "return_progress": True,
                                                "timings_per_token": True})
    timings = [c["timings"] for c in chunks if "prompt_progress" in c]
    assert timings[0]["prompt_n"] == 0 and timings[0]["prompt_ms"] == 0 and timings[0]["predicted_n"] == 0
    assert all(a["prompt_ms"] <= b["prompt_ms"] for a, b in zip(timings, timings[1:])) and timings[-1]["prompt_ms"] > 0


def test_without_return_progress_no_progress_is_sent(served):
    chunks = stream(served.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}], "max_tokens": 2})
    assert not progress_of(chunks) and chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_servers_batch_size_is_the_chunk_a_prompt_is_read_in(tiny_models, parallel):
    from tests.server.conftest import serving

    with serving(tiny_models.main, parallel=parallel, read_chunk=64) as s:
        progress = progress_of(stream(s.url, "/completion", {"prompt": LONG, "n_predict": 1, "return_progress": True}))
    assert [p["processed"] for p in progress[1:-1]] == list(range(64, progress[0]["total"], 64))
