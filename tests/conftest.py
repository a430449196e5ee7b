"""Shared fixtures: tiny GGUF models written once per test session, real models when present."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.core.gguf.tiny import TinySpec, write_tiny_model  # noqa: E402


@dataclass(frozen=True)
class TinyModels:
    main: Path
    same: Path          # the main model's weights: every draft token is accepted
    other: Path         # other weights, same vocabulary: almost nothing is accepted
    other_vocab: Path   # another vocabulary: it drafts through text (app/core/speculation/crossvocab.py)
    bigger: Path        # compatible, but larger than the main model
    no_template: Path   # no chat template in its metadata
    incompatible: Path  # an MTP drafter made for gemma4 models: it cannot draft for the main model


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> TinyModels:
    d = tmp_path_factory.mktemp("tiny-models")
    return TinyModels(
        main=write_tiny_model(d / "main.gguf", TinySpec(seed=0)),
        same=write_tiny_model(d / "same.gguf", TinySpec(seed=0)),
        other=write_tiny_model(d / "other.gguf", TinySpec(seed=1)),
        other_vocab=write_tiny_model(d / "other-vocab.gguf", TinySpec(seed=2, other_vocab=True)),
        bigger=write_tiny_model(d / "bigger.gguf", TinySpec(seed=3, n_layer=4)),
        no_template=write_tiny_model(d / "no-template.gguf", TinySpec(seed=0, chat_template=None)),
        incompatible=write_tiny_model(d / "gemma4-assistant.gguf", TinySpec(architecture="gemma4-assistant",
                                                                            name="tiny-gemma4-assistant")),
    )


def real_model_dir() -> Path | None:
    for candidate in (os.environ.get("QUICKDRAFT_TEST_MODELS"), os.environ.get("QUICKDRAFT_BENCH_MODELS"),
                      str(Path.home() / ".cache" / "quickdraft-bench")):
        if candidate and (Path(candidate) / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").exists():
            return Path(candidate)
    return None
