"""Fixtures: a fake Hugging Face Hub on 127.0.0.1 serving tiny GGUF models, and a models folder."""

from __future__ import annotations

import pytest

from app.models.download import transfer
from app.models.hub import HubClient

from .fakehub import FakeHub, populated_hub, start_fake_hub


@pytest.fixture
def fake_hub(tmp_path_factory, monkeypatch) -> FakeHub:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setattr(transfer, "RETRY_DELAY_S", 0.05)
    hub = populated_hub(tmp_path_factory.mktemp("hub-files"))
    server, thread = start_fake_hub(hub)
    yield hub
    hub.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def client(fake_hub) -> HubClient:
    return HubClient(endpoint=fake_hub.url, token="hf_test_token")


@pytest.fixture
def models_dir(tmp_path):
    d = tmp_path / "models"
    d.mkdir()
    return d
