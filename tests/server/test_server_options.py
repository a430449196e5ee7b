"""llama-server's options for what a server tells and opens: several aliases and tags (/models), the
slots endpoint switched off (501), the chat page at / (and --no-ui), several listening addresses."""

from __future__ import annotations

import argparse
import socket
import time

import httpx
import pytest

from app.server.cli import add_serve_args
from app.server.options import ServerOptions, comma_separated
from tests.server.conftest import serving

CHAT = {"messages": [{"role": "user", "content": "the cat"}], "max_tokens": 2, "temperature": 0}


def test_aliases_and_tags_are_read_as_llama_server_reads_them():
    assert comma_separated(" tinyllama-2, fim,,code ,fim") == ("code", "fim", "tinyllama-2")
    assert comma_separated(None) == () and ServerOptions().model_id is None
    assert ServerOptions(aliases="tinyllama-2,fim,code").model_id == "code"   # the first in sorted order


def test_models_lists_every_alias_and_tag_and_answers_go_by_the_first(tiny_models):
    with serving(tiny_models.main, aliases="tinyllama-2,fim,code", tags="chat,fim,small") as s:
        [model] = httpx.get(s.url + "/models").json()["data"]
        assert (model["id"], set(model["aliases"]), set(model["tags"])) == \
            ("code", {"tinyllama-2", "fim", "code"}, {"chat", "fim", "small"})
        assert httpx.post(s.url + "/v1/chat/completions", json=CHAT, timeout=30).json()["model"] == "code"


def test_no_slots_answers_501_and_props_says_so(tiny_models):
    with serving(tiny_models.main, slots_endpoint=False) as s:
        refused = httpx.get(s.url + "/slots")
        assert refused.status_code == 501 and refused.json()["error"]["type"] == "not_supported_error"
        assert httpx.get(s.url + "/props").json()["endpoint_slots"] is False
    with serving(tiny_models.main) as s:
        assert httpx.get(s.url + "/slots").status_code == 200
        assert httpx.get(s.url + "/props").json()["endpoint_slots"] is True


def test_the_chat_page_is_served_without_the_key_and_talks_to_the_api(tiny_models):
    with serving(tiny_models.main, api_key="sk-page") as s:
        page = httpx.get(s.url + "/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.text.startswith("<!doctype html>")
        assert "/v1/chat/completions" in page.text and "Authorization" in page.text   # asks for the key itself
        assert "http://" not in page.text and "https://" not in page.text              # loads nothing from elsewhere
        assert httpx.get(s.url + "/index.html").text == page.text
        assert httpx.get(s.url + "/v1/models").status_code == 401                      # the API still needs it


def test_no_ui_leaves_the_page_out(tiny_models):
    with serving(tiny_models.main, web_ui=False) as s:
        assert httpx.get(s.url + "/").status_code == 404


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="IPv6 loopback is unavailable")
def test_several_addresses_are_each_listened_on_at_one_port(tiny_models):
    with serving(tiny_models.main, host="127.0.0.1,::1") as s:
        port = s.server.port
        for base in (f"http://127.0.0.1:{port}", f"http://[::1]:{port}"):
            assert httpx.get(base + "/health").status_code == 200
            assert httpx.post(base + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200


def test_an_address_that_cannot_be_listened_on_closes_the_ones_already_bound(tiny_models):
    from app.core.errors import QuickdraftError
    from app.server.run import bind, bind_all

    free = bind("127.0.0.1", 0)
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(QuickdraftError, match="cannot listen on 192.0.2.1") as refused:   # no interface has it
        bind_all(["127.0.0.1", "192.0.2.1"], port)
    # the first one's socket was closed, not left to the collector (``refused`` keeps its frame alive)
    bind("127.0.0.1", port).close()
    assert refused.value


def test_the_command_line_takes_llama_servers_spellings():
    p = argparse.ArgumentParser()
    add_serve_args(p)
    args = p.parse_args(["-a", "a,b", "--tags", "x", "--no-slots", "--no-ui", "--no-metrics", "--host", "127.0.0.1,::1"])
    assert (args.alias, args.tags, args.slots, args.ui, args.metrics, args.host) == \
        ("a,b", "x", False, False, False, "127.0.0.1,::1")
    defaults = p.parse_args([])
    assert defaults.slots and defaults.ui and defaults.metrics and defaults.cont_batching
    assert p.parse_args(["-nocb"]).cont_batching is False and p.parse_args(["--no-cont-batching"]).cont_batching is False


@pytest.mark.parametrize("kwargs, words", [("{not json", "is not JSON"), ("[1]", "a JSON object"),
                                            ('{"messages": []}', "may not set messages")])
def test_bad_chat_template_kwargs_are_named(kwargs, words):
    from app.server.api import template_defaults

    with pytest.raises(ValueError, match=words):
        template_defaults(kwargs)
    assert template_defaults('{"a": 1}', "on") == {"a": 1, "enable_thinking": True}
    assert template_defaults(None) == {"enable_thinking": True} and template_defaults(None, "off") == {"enable_thinking": False}


def test_no_metrics_answers_501_and_metrics_carry_the_start_time_and_decodes(tiny_models):
    with serving(tiny_models.main, metrics_endpoint=False) as s:
        refused = httpx.get(s.url + "/metrics")
        assert refused.status_code == 501 and refused.json()["error"]["type"] == "not_supported_error"
        assert httpx.get(s.url + "/props").json()["endpoint_metrics"] is False
    with serving(tiny_models.main, tiny_models.same, parallel=1) as s:   # slots decoding alone: 1 a decode
        httpx.post(s.url + "/v1/chat/completions", json=CHAT | {"max_tokens": 8}, timeout=30)
        metrics = httpx.get(s.url + "/metrics")
        [started] = [int(value) for name, value in metrics.headers.raw if name == b"Process-Start-Time-Unix"]
        assert abs(started - time.time()) < 600
        assert "llamacpp:n_busy_slots_per_decode 1.0" in metrics.text
        assert "# TYPE llamacpp:n_tokens_max counter" in metrics.text and "llamacpp:n_tokens_max 0\n" not in metrics.text


def test_sampling_flags_are_the_defaults_of_requests_that_set_none():
    from app.server.options import request_defaults, with_request_defaults

    p = argparse.ArgumentParser()
    add_serve_args(p)
    defaults = request_defaults(p.parse_args(["--temp", "0", "-s", "42", "-n", "3", "--top-k", "5"]))
    assert defaults == {"temperature": 0.0, "top_k": 5, "seed": 42, "n_predict": 3}
    assert request_defaults(p.parse_args([])) == {}
    assert with_request_defaults({"temperature": 1.0}, defaults) == \
        {"temperature": 1.0, "top_k": 5, "seed": 42, "n_predict": 3}
    # the length default never wins over a length the request gives (n_predict would beat max_tokens)
    assert "n_predict" not in with_request_defaults({"max_tokens": 9}, defaults)
    assert "n_predict" not in with_request_defaults({"max_completion_tokens": 9}, defaults)


def test_a_servers_sampling_defaults_shape_its_answers_and_props(tiny_models):
    defaults = {"temperature": 0.0, "seed": 42, "n_predict": 3}
    with serving(tiny_models.main, request_defaults=defaults) as s:
        chat = {"messages": [{"role": "user", "content": "the cat"}]}
        assert httpx.post(s.url + "/v1/chat/completions", json=chat, timeout=30).json()["usage"]["completion_tokens"] == 3
        longer = httpx.post(s.url + "/v1/chat/completions", json=chat | {"max_tokens": 5}, timeout=30).json()
        assert longer["usage"]["completion_tokens"] == 5
        native = httpx.post(s.url + "/completion", json={"prompt": "the cat"}, timeout=30).json()
        assert native["tokens_predicted"] == 3 and native["generation_settings"]["seed"] == 42
        params = httpx.get(s.url + "/props").json()["default_generation_settings"]["params"]
        assert (params["seed"], params["temperature"], params["n_predict"]) == (42, 0.0, 3)


def test_a_sampling_flag_out_of_range_is_one_line_naming_it(tiny_models, tmp_path):
    from tests.server.test_serve_cli import run

    r = run("serve", "-m", str(tiny_models.main), "--temp", "7", tmp_path=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error: --temp: ") and "Traceback" not in r.stderr
