"""`quickdraft serve -md DRAFTER.gguf` with an EAGLE-3 or a DFlash drafter: the server drafts with it (the
default choice with a draft) and serves the main model's own greedy answer, its drafts counted in
llama-server's timings."""

from __future__ import annotations

import pytest

from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.params import DEFAULT_DRAFTER, DrafterKind
from tests.server.conftest import greedy_text, serving

MESSAGES = [{"role": "user", "content": "the cat is on the mat"}]


DRAFTERS = {
    DrafterKind.EAGLE3: TinySpec(architecture="eagle3", name="tiny-eagle3", n_layer=1, target_layers=(0, 1, 1)),
    DrafterKind.DFLASH: TinySpec(architecture="dflash", name="tiny-dflash", n_layer=2, target_layers=(0, 1), block_size=8),
}


@pytest.mark.parametrize("kind", list(DRAFTERS))
def test_a_hidden_state_drafter_serves_the_main_models_greedy_answer(tiny_models, tmp_path, kind):
    import openai

    drafter = write_tiny_model(tmp_path / f"{kind.value}.gguf", DRAFTERS[kind])
    with serving(tiny_models.main, drafter, drafter=DEFAULT_DRAFTER.value) as served:
        assert served.jobs.pair.drafts_as is kind
        assert served.jobs.drafting is kind
        with openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
            reply = client.chat.completions.create(model=served.model_id, messages=MESSAGES, max_tokens=32,
                                                   temperature=0)
    assert reply.choices[0].message.content == greedy_text(tiny_models.main, MESSAGES, 32)
    assert reply.model_extra["timings"]["draft_n"] > 0
