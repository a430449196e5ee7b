"""What clients of one-model servers expect: any model name answered by the loaded pair, and
llama-server's draft counts in ``timings`` whenever the server speculates, zero or not."""

from __future__ import annotations

import json

import httpx
import pytest

from app.core.params import DrafterKind, SpeculationParams
from app.core.speculation.events import Summary
from app.server.responses import summary_timings
from tests.server.conftest import serving

MESSAGES = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]
ROUTES = {"chat": ("/v1/chat/completions", {"messages": MESSAGES}),
          "completion": ("/v1/completions", {"prompt": "the cat is"})}
DRAFT_FIELDS = ("draft_n", "draft_n_accepted")


@pytest.fixture(scope="module")
def lookup_served(tiny_models):
    """Prompt lookup alone, no draft model, under the auto policy (which estimates the speedup)."""
    with serving(tiny_models.main, drafter="lookup", speculation=SpeculationParams(draft_max=4)) as s:
        yield s


@pytest.fixture(scope="module")
def plain_served(tiny_models):
    """No speculation: ``--drafter none``."""
    with serving(tiny_models.main, drafter="none") as s:
        yield s


def post(url: str, route: str, **fields) -> list[dict] | dict:
    """The response body, or a stream's chunks (without [DONE]); asserts a 200."""
    path, body = ROUTES[route]
    body = {k: v for k, v in (body | fields).items() if v is not None}
    response = httpx.post(url + path, json=body, timeout=30)
    assert response.status_code == 200, response.text
    if not body.get("stream"):
        return response.json()
    events = [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def timed(chunks: list[dict]) -> list[dict]:
    return [c["timings"] for c in chunks if "timings" in c]


# --- 1. any model name ---------------------------------------------------------------------------

@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["gpt-4o-mini", "local", None])
def test_any_model_name_or_none_is_answered_by_the_loaded_pair(served, route, stream, model):
    answer = post(served.url, route, model=model, stream=stream, max_tokens=4, temperature=0)
    bodies = answer if stream else [answer]
    assert bodies and all(b["model"] == served.model_id for b in bodies)
    assert all("error" not in b for b in bodies)


def test_the_openai_client_may_name_any_model(client, served):
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=4)
    assert answer.model == served.model_id and answer.choices[0].message.content is not None
    chunks = list(client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=4, stream=True))
    assert chunks and {c.model for c in chunks} == {served.model_id}
    assert [m.id for m in client.models.list().data] == [served.model_id]  # still the real pair


def test_models_still_lists_the_real_pair(served):
    post(served.url, "chat", model="gpt-4o-mini", max_tokens=1)
    (model,) = httpx.get(served.url + "/v1/models").json()["data"]
    assert model["id"] == served.model_id == "main"
    assert model["meta"]["main"] == "main.gguf" and model["meta"]["draft"] == "same.gguf"


# --- 2. draft counts whenever the server speculates ----------------------------------------------

@pytest.mark.parametrize("route", ROUTES)
def test_an_answer_that_drafted_nothing_reports_zero_drafts(served, route):
    answer = post(served.url, route, max_tokens=1, temperature=0)
    assert answer["usage"]["completion_tokens"] == 1
    assert {k: answer["timings"].get(k) for k in DRAFT_FIELDS} == {"draft_n": 0, "draft_n_accepted": 0}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("per_token", [False, True])
def test_a_streamed_answer_that_drafted_nothing_reports_zero_drafts(served, route, per_token):
    chunks = post(served.url, route, max_tokens=1, temperature=0, stream=True, timings_per_token=per_token)
    timings = timed(chunks)
    assert len(timings) == (2 if per_token else 1)  # the first token's live timings, then the final chunk's
    assert all(t.get("draft_n") == 0 and t.get("draft_n_accepted") == 0 for t in timings)


@pytest.mark.parametrize("stream", [False, True])
def test_lookup_without_a_draft_model_speculates_and_reports_zero_drafts(lookup_served, stream):
    assert lookup_served.jobs.drafting is DrafterKind.LOOKUP
    answer = post(lookup_served.url, "chat", max_tokens=1, temperature=0, stream=stream, timings_per_token=stream)
    timings = timed(answer) if stream else [answer["timings"]]
    assert timings and all(t.get("draft_n") == 0 and t.get("draft_n_accepted") == 0 for t in timings)


def test_live_timings_carry_draft_counts_from_the_first_chunk(lookup_served):
    chunks = post(lookup_served.url, "completion", max_tokens=30, temperature=0, stream=True, timings_per_token=True)
    timings = timed(chunks)
    assert len(timings) > 2 and all("draft_n" in t and "draft_n_accepted" in t for t in timings)
    assert timings[0]["draft_n"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_without_speculation_there_are_no_draft_counts(plain_served, stream):
    assert plain_served.jobs.drafting is DrafterKind.NONE
    answer = post(plain_served.url, "chat", max_tokens=8, temperature=0, stream=stream, timings_per_token=stream)
    timings = timed(answer) if stream else [answer["timings"]]
    assert timings and all(t["predicted_n"] >= 1 for t in timings)
    assert not any(k in t for t in timings for k in DRAFT_FIELDS)


# --- the estimated speedup (a Quickdraft extension) -------------------------------------------------

def summary(**fields) -> Summary:
    counts = dict(drafted=0, accepted=0, drafting_rounds=0) | fields
    return Summary(prompt_tokens=10, prompt_tokens_evaluated=10, generated_tokens=5, ttft_s=0.1, prompt_s=0.1,
                   generation_s=0.2, main_tokens=5, rounds=4, draft_s=0.0, verify_s=0.2, **counts)


def test_timings_carry_the_estimated_speedup_when_there_is_one():
    assert summary_timings(summary(estimated_speedup=1.75), speculative=True)["estimated_speedup"] == 1.75
    assert "estimated_speedup" not in summary_timings(summary(), speculative=True)
    plain = summary_timings(summary(), speculative=False)
    assert not any(k in plain for k in DRAFT_FIELDS)


def test_the_auto_policy_reports_its_estimated_speedup_in_the_final_timings(lookup_served):
    chunks = post(lookup_served.url, "completion", max_tokens=30, temperature=0, stream=True, timings_per_token=True)
    timings = timed(chunks)
    assert timings[-1]["estimated_speedup"] > 0
    assert not any("estimated_speedup" in t for t in timings[:-1])  # live timings have no estimate
    answer = post(lookup_served.url, "chat", max_tokens=30, temperature=0)
    assert answer["timings"]["estimated_speedup"] > 0


def test_a_speculating_servers_final_timings_say_its_drafting_rounds_and_each_drafters_counts():
    drafted = summary(drafted=9, accepted=5, drafting_rounds=3,
                      by_drafter=(("lookup", 6, 4), ("model (other vocabulary)", 3, 1)))
    timings = summary_timings(drafted, speculative=True)
    assert timings["drafting_rounds"] == 3 and timings["draft_n_accepted"] / timings["drafting_rounds"] == 5 / 3
    assert (timings["draft_n_lookup"], timings["draft_n_accepted_lookup"]) == (6, 4)
    assert (timings["draft_n_model_other_vocabulary"], timings["draft_n_accepted_model_other_vocabulary"]) == (3, 1)
    assert all(isinstance(value, (int, float)) for value in timings.values())   # as llama-server's, all numbers
    assert not {"drafting_rounds", "draft_n_lookup"} & set(summary_timings(drafted, speculative=False))
