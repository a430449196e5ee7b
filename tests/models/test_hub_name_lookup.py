"""A hub whose name cannot be looked up fails at once with one clear message (issue 41, fault 5):
huggingface_hub tried five more times, waiting between, about 25 s for the same answer."""

from __future__ import annotations

import pytest

from app.models.hub import HubClient, HubError, name_lookup_error

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture
def no_proxy(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_name_that_does_not_resolve_is_said_without_asking_the_hub(no_proxy, monkeypatch):
    client = HubClient(endpoint="https://hub.invalid")   # .invalid never resolves (RFC 6761)
    asked = []
    monkeypatch.setattr(client.api, "list_models", lambda *a, **k: asked.append(a) or [])
    monkeypatch.setattr(client.api, "model_info", lambda *a, **k: asked.append(a))
    for call, args in ((client.search, ("qwen",)), (client.list_models, ("org/repo",)),
                       (client.card_summary, ("org/repo",))):
        with pytest.raises(HubError) as caught:
            call(*args)
        assert "its address could not be looked up" in str(caught.value) and "Errno" not in str(caught.value)
    assert asked == []


def test_an_address_that_resolves_or_a_proxy_leaves_the_request_to_say(no_proxy, monkeypatch):
    assert name_lookup_error("http://127.0.0.1:9") == ""
    assert name_lookup_error("https://hub.invalid") != ""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")   # the proxy looks names up, not this machine
    assert name_lookup_error("https://hub.invalid") == ""
