"""Real models, through the server: Qwen2.5-Coder 1.5B with its 0.5B draft answers response_format's JSON
Schema with JSON that matches it, and tool_choice "required" with a call to a declared function whose
arguments match its schema (skipped when the models are not present; see tests/real/test_qwen_pair.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from app.core.engine import Engine
from app.core.params import DrafterKind, ModelParams, SpeculationParams
from app.server.run import LocalServer
from app.server.slots import ThreadedJobs
from tests.conftest import real_model_dir
from tests.real.test_qwen_pair import DRAFT, MAIN

MODELS = real_model_dir()
pytestmark = [pytest.mark.real_models,
              pytest.mark.skipif(MODELS is None, reason="real models not present (see tests/real/test_qwen_pair.py)")]
PROFILE = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                            "languages": {"type": "array", "items": {"type": "string"},
                                                          "minItems": 1, "maxItems": 3}},
           "required": ["name", "age", "languages"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
                                                "required": ["city", "unit"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone.",
                                          "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                                                         "required": ["zone"]}}}


@pytest.fixture(scope="module")
def url():
    def load():
        return Engine.load(ModelParams(str(MODELS / MAIN), n_ctx=2048, n_threads=2),
                           ModelParams(str(MODELS / DRAFT), n_ctx=2048, n_threads=2))

    jobs = ThreadedJobs(load, SpeculationParams(policy="fixed", draft_max=6), DrafterKind.MODEL)
    jobs.start()
    server = LocalServer(jobs, "127.0.0.1", 0)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        jobs.stop()


def chat(url: str, body: dict) -> dict:
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


@pytest.mark.parametrize("temperature", [0.0])
def test_response_format_json_schema_gives_json_that_matches_it(url, temperature):
    choice = chat(url, {"messages": [{"role": "user", "content": "Describe Ada, a fictional programmer who knows three languages, as JSON."}],
                        "response_format": {"type": "json_schema", "json_schema": {"name": "profile", "schema": PROFILE}},
                        "temperature": temperature, "seed": 7, "max_tokens": 200})
    assert choice["finish_reason"] == "stop", choice
    value = json.loads(choice["message"]["content"])
    assert set(value) == {"name", "age", "languages"} and isinstance(value["age"], int)
    assert 1 <= len(value["languages"]) <= 3 and all(isinstance(x, str) for x in value["languages"])


@pytest.mark.parametrize("temperature", [0.7])
def test_tool_choice_required_calls_a_declared_function_with_valid_arguments(url, temperature):
    choice = chat(url, {"messages": [{"role": "user", "content": "Is it cold in Oslo right now?"}],
                        "tools": [WEATHER, CLOCK], "tool_choice": "required", "temperature": temperature, "seed": 7,
                        "max_tokens": 80})
    assert choice["finish_reason"] == "tool_calls", choice
    for call in choice["message"]["tool_calls"]:
        arguments = json.loads(call["function"]["arguments"])
        if call["function"]["name"] == "get_weather":
            assert isinstance(arguments["city"], str) and arguments["unit"] in ("C", "F")
        else:
            assert call["function"]["name"] == "get_time" and isinstance(arguments["zone"], str)
