"""A live Quickdraft server on loopback with the tiny models, for the openai client and raw HTTP."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from app.core.engine import Engine
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.server.options import ServerOptions
from app.server.run import LocalServer
from app.server.slots import DEFAULT_PARALLEL, ThreadedJobs

N_CTX = 2048
SPECULATION = SpeculationParams(policy="fixed", draft_max=4)


@dataclass
class Served:
    url: str
    jobs: ThreadedJobs
    server: LocalServer

    @property
    def model_id(self) -> str:
        return self.jobs.pair.model_id


@contextmanager
def serving(main, draft=None, api_key=None, max_waiting=8, host="127.0.0.1", drafter=None,
            speculation=SPECULATION, parallel=DEFAULT_PARALLEL, read_chunk=None, merge=True, **options):
    """A server on ``main`` (and ``draft``) drafting with ``drafter``: by default the draft model
    when there is one, else none; ``merge`` False: each slot a context of its own; ``options``:
    ServerOptions' (aliases, cors_origins, ...)."""
    def load():
        return Engine.load(ModelParams(str(main), n_ctx=N_CTX, n_threads=1),
                           ModelParams(str(draft), n_ctx=N_CTX, n_threads=1) if draft else None)

    drafter = DrafterKind(drafter or ("model" if draft else "none"))
    jobs = ThreadedJobs(load, speculation, drafter, max_waiting=max_waiting, parallel=parallel, read_chunk=read_chunk,
                        merge=merge)
    jobs.start()
    server = LocalServer(jobs, host, 0, ServerOptions(api_key=api_key, **options))
    server.start()
    try:
        yield Served(server.url, jobs, server)
    finally:
        server.stop()
        jobs.stop()


@pytest.fixture(scope="module")
def served(tiny_models):
    """The tiny main model drafting with its own weights: every draft token is accepted."""
    with serving(tiny_models.main, tiny_models.same) as s:
        yield s


@pytest.fixture
def client(served):
    import openai

    with openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=30) as c:
        yield c


def greedy_text(main, messages, max_tokens: int) -> str:
    """The main model's own greedy answer, from an engine of the test's own."""
    engine = Engine.load(ModelParams(str(main), n_ctx=N_CTX, n_threads=1))
    try:
        request = GenerationRequest(messages, sampling=SamplingParams(max_tokens=max_tokens), drafter=DrafterKind.NONE)
        events = list(engine.generate(request))
    finally:
        engine.close()
    return events[-1].text
