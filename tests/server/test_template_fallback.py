"""A chat template the server cannot render: the answer goes on in llama.cpp's rendering of the format
the template shows, and whoever runs the server is told, once."""

from __future__ import annotations

import httpx

from app.core.gguf.tiny import TinySpec, write_tiny_model
from tests.core.chat.test_guards import UNRENDERABLE_CHATML
from tests.server.conftest import serving


def test_a_template_that_fails_here_answers_in_llama_cpps_format_and_warns_once(tmp_path, capfd):
    main = write_tiny_model(tmp_path / "unrenderable.gguf", TinySpec(chat_tokens=True, chat_template=UNRENDERABLE_CHATML))
    body = {"messages": [{"role": "user", "content": "the cat"}], "max_tokens": 2}
    with serving(main) as served:
        for _ in range(2):
            r = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 200, r.text
        r = httpx.post(served.url + "/apply-template", json=body, timeout=30)
    assert r.json()["prompt"] == "<|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n"
    told = [line for line in capfd.readouterr().err.splitlines() if "could not be rendered" in line]
    assert len(told) == 1 and "llama.cpp's built-in format" in told[0]


def test_tools_for_a_template_that_fails_here_go_in_the_generic_format(tmp_path):
    main = write_tiny_model(tmp_path / "unrenderable.gguf", TinySpec(chat_tokens=True, chat_template=UNRENDERABLE_CHATML))
    tool = {"type": "function", "function": {"name": "greet", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
    body = {"messages": [{"role": "user", "content": "the cat"}], "tools": [tool], "tool_choice": "required",
            "max_tokens": 48, "temperature": 0}
    with serving(main) as served:
        prompt = httpx.post(served.url + "/apply-template", json=body, timeout=30).json()["prompt"]
        answer = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=60)
    assert prompt.startswith("<|im_start|>") and '"greet"' in prompt   # ChatML by llama.cpp, the tools shown
    assert answer.status_code == 200, answer.text
    message = answer.json()["choices"][0]["message"]
    assert message["content"] or message["tool_calls"][0]["function"]["name"] == "greet"
