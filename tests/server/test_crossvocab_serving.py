"""`quickdraft serve` with a draft of another vocabulary: the served greedy answer is the main model's own."""

from __future__ import annotations

import pytest

from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.params import DrafterKind
from tests.server.conftest import greedy_text, serving

MESSAGES = [{"role": "user", "content": "the cat is on the mat"}]


@pytest.fixture(scope="module")
def bpe_draft(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("serve-bpe") / "bpe-draft.gguf", TinySpec(seed=5, bpe_vocab=True))


def test_a_draft_of_another_vocabulary_serves_the_main_models_greedy_answer(tiny_models, bpe_draft):
    import openai

    with serving(tiny_models.main, bpe_draft) as served:
        assert served.jobs.drafting is DrafterKind.MODEL
        with openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
            reply = client.chat.completions.create(model=served.model_id, messages=MESSAGES, max_tokens=32,
                                                   temperature=0)
    assert reply.choices[0].message.content == greedy_text(tiny_models.main, MESSAGES, 32)
    timings = reply.model_extra["timings"]
    assert timings["draft_n"] > 0, timings
