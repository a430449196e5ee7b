"""Fixtures: a fake Hugging Face Hub on 127.0.0.1 serving tiny GGUF models, and a models folder."""

from __future__ import annotations

import pytest

from app.models.hub import HubClient
from tests.models.fakehub import FakeHub, serve_for_a_test


@pytest.fixture
def fake_hub(tmp_path_factory, monkeypatch) -> FakeHub:
    yield from serve_for_a_test(tmp_path_factory.mktemp("hub-files"), monkeypatch)


@pytest.fixture
def client(fake_hub) -> HubClient:
    return HubClient(endpoint=fake_hub.url, token="hf_test_token")


@pytest.fixture
def models_dir(tmp_path):
    d = tmp_path / "models"
    d.mkdir()
    return d
