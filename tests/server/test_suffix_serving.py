"""The server's answers feed the suffix index (through the HTTP app, as a client drives it), each turn
only what is new to its conversation, and the next request drafts from it."""

from __future__ import annotations

import httpx

from app.core.engine import Engine
from app.core.params import DrafterKind, ModelParams, SuffixConfig
from app.core.speculation.suffix_store import index_key, read_log
from app.server.run import LocalServer
from app.server.slots import ThreadedJobs
from tests.server.conftest import N_CTX, SPECULATION

ASK = [{"role": "user", "content": "the cat sat on the mat"}]


def chat(url: str, messages: list[dict]) -> dict:
    body = {"messages": messages, "max_tokens": 16, "temperature": 0}
    reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_answers_feed_the_index_and_the_next_request_drafts_from_it(tiny_models, tmp_path):
    config = SuffixConfig(tmp_path / "suffix-index", 8 << 20)

    def load():
        return Engine.load(ModelParams(str(tiny_models.main), n_ctx=N_CTX, n_threads=1), suffix=config)

    jobs = ThreadedJobs(load, SPECULATION, DrafterKind.SUFFIX, parallel=1)
    jobs.start()
    server = LocalServer(jobs, "127.0.0.1", 0)
    server.start()
    try:
        first = chat(server.url, ASK)
        answer = first["choices"][0]["message"]["content"]
        follow = ASK + [{"role": "assistant", "content": answer}, {"role": "user", "content": "and the dog?"}]
        chat(server.url, follow)
        again = chat(server.url, ASK)   # the first question again: its answer is in the index
    finally:
        server.stop()
        jobs.stop()   # closes the engine: what was fed is on disk
    assert again["choices"][0]["message"]["content"] == answer
    assert first["timings"].get("draft_n_accepted", 0) == 0 and again["timings"]["draft_n_accepted"] > 0
    docs, _ = read_log(config.folder / index_key(tiny_models.main) / "tokens.log")
    assert len(docs) == 3
    # the follow-up's document starts where its prompt leaves what the first turn fed (the tiny model's
    # answer, bytes that are no text, is read back otherwise), not with the conversation's start again
    prompt = len(docs[0]) - 16
    assert docs[1][:prompt].tolist() != docs[0][:prompt].tolist() and len(docs[1]) < prompt + 16 + 16 + 32
    assert docs[2].tolist() == docs[0].tolist()[-16:]   # the first question again: its prompt was fed, its answer is new
