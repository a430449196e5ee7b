"""scripts/llama_server_suite/llama-server: started as llama.cpp's server tests start llama-server, it
serves `quickdraft serve` with the options Quickdraft has (port, key, alias, tags, context, CORS, the
slots endpoint, the slot save folder, the web UI, continuous batching) and the
model it is given instead of the one the test names."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "scripts" / "llama_server_suite" / "llama-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def shim_serving(tiny_models, options: list[str], cwd: Path | None = None) -> Iterator[tuple[str, list[str]]]:
    """The shim started as the suite starts llama-server, with ``options``, serving the tiny main model:
    (its URL, a list that holds its stderr once it has stopped)."""
    port = free_port()
    env = {**os.environ, "QUICKDRAFT_SUITE_PYTHON": sys.executable, "QUICKDRAFT_SUITE_MAIN": str(tiny_models.main),
           "QUICKDRAFT_SUITE_DRAFT": ""}
    server = subprocess.Popen([str(SHIM), "--port", str(port), *options], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            if server.poll() is not None:
                break
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url, err
    finally:
        server.terminate()
        err.append(server.communicate(timeout=30)[1])


def test_the_shim_serves_quickdraft_behind_llama_servers_options(tiny_models):
    options = ["--temp", "0.8", "--seed", "42", "--hf-repo", "ggml-org/models", "--alias", "tinyllama-2",
               "--ctx-size", "512", "--parallel", "2", "--cors-origins", "localhost", "--api-key", "sk-key", "--jinja",
               "--no-ui", "--tags", "chat,fim", "--no-slots", "-nocb"]
    with shim_serving(tiny_models, options) as (url, stderr):
        auth = {"Authorization": "Bearer sk-key"}
        [model] = httpx.get(url + "/v1/models", headers=auth).json()["data"]
        assert model["id"] == "tinyllama-2" and model["tags"] == ["chat", "fim"]
        assert httpx.get(url + "/slots", headers=auth).status_code == 501 and httpx.get(url + "/").status_code == 404
        props = httpx.get(url + "/props", headers=auth).json()
        settings = props["default_generation_settings"]
        assert settings["n_ctx"] == 256 and props["total_slots"] == 2   # --parallel given: the context divided
        assert (settings["params"]["seed"], settings["params"]["temperature"]) == (42, 0.8)
        assert httpx.get(url + "/props").status_code == 401
        preflight = httpx.options(url + "/completion", headers={"Origin": "http://evil.com"})
        assert "access-control-allow-origin" not in preflight.headers
    [err] = stderr
    assert "--hf-repo ggml-org/models" in err and "--jinja" in err   # named, not passed
    assert "--temp 0.8" not in err.split("not passed on:")[1]
    assert "-nocb" not in err and "2 at once) at" in err   # passed: the slots decode alone, not together


def test_the_shim_passes_a_chat_template_file_and_the_reasoning_switch(tiny_models, tmp_path):
    """--chat-template-file (relative to where the suite runs: serve runs in the repository) replaces the
    model's template; --reasoning off and --chat-template-kwargs are what every request's template reads."""
    (tmp_path / "t.jinja").write_text("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                                      "<think={{ enable_thinking }} x={{ x }}>{% if add_generation_prompt %}[assistant:{% endif %}")
    options = ["--chat-template-file", "t.jinja", "--reasoning", "off", "--chat-template-kwargs", '{"x": 7}']
    with shim_serving(tiny_models, options, cwd=tmp_path) as (url, _):
        messages = [{"role": "user", "content": "hi"}]
        prompt = httpx.post(url + "/apply-template", json={"messages": messages}).json()["prompt"]
        assert prompt == "[user:hi]<think=False x=7>[assistant:"
        asked = {"messages": messages, "chat_template_kwargs": {"enable_thinking": True}}
        assert httpx.post(url + "/apply-template", json=asked).json()["prompt"] == "[user:hi]<think=True x=7>[assistant:"


def test_the_shim_passes_a_built_in_template_by_name(tiny_models):
    """--chat-template NAME: llama.cpp's own rendering of its built-in template (the tiny model has none)."""
    with shim_serving(tiny_models, ["--chat-template", "chatml"]) as (url, _):
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
        prompt = httpx.post(url + "/apply-template", json={"messages": messages}).json()["prompt"]
        assert prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        answer = httpx.post(url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 3}).json()
        assert answer["usage"]["completion_tokens"] == 3


def test_the_shim_passes_the_slot_save_path(tiny_models, tmp_path):
    """--slot-save-path, relative to where the suite runs: a slot saved lands in that folder."""
    (tmp_path / "slots").mkdir()
    with shim_serving(tiny_models, ["--slot-save-path", "slots"], cwd=tmp_path) as (url, _):
        httpx.post(url + "/completion", json={"prompt": "the cat", "n_predict": 2, "id_slot": 0}, timeout=60)
        saved = httpx.post(url + "/slots/0?action=save", json={"filename": "s.bin"}, timeout=60)
        assert saved.status_code == 200 and saved.json()["n_saved"] > 0
    assert (tmp_path / "slots" / "s.bin").stat().st_size == saved.json()["n_written"]
