"""`quickdraft serve -md EAGLE3.gguf`: the server drafts with the EAGLE-3 drafter (the default choice
with a draft) and serves the main model's own greedy answer, its drafts counted in llama-server's
timings."""

from __future__ import annotations

import pytest

from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.params import DEFAULT_DRAFTER, DrafterKind
from tests.server.conftest import greedy_text, serving

MESSAGES = [{"role": "user", "content": "the cat is on the mat"}]


@pytest.fixture(scope="module")
def eagle3(tmp_path_factory):
    spec = TinySpec(architecture="eagle3", name="tiny-eagle3", n_layer=1, target_layers=(0, 1, 1))
    return write_tiny_model(tmp_path_factory.mktemp("serve-eagle3") / "eagle3.gguf", spec)


def test_an_eagle3_drafter_serves_the_main_models_greedy_answer(tiny_models, eagle3):
    import openai

    with serving(tiny_models.main, eagle3, drafter=DEFAULT_DRAFTER.value) as served:
        assert served.jobs.pair.drafts_as is DrafterKind.EAGLE3
        assert served.jobs.drafting is DrafterKind.EAGLE3
        with openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
            reply = client.chat.completions.create(model=served.model_id, messages=MESSAGES, max_tokens=32,
                                                   temperature=0)
    assert reply.choices[0].message.content == greedy_text(tiny_models.main, MESSAGES, 32)
    assert reply.model_extra["timings"]["draft_n"] > 0
