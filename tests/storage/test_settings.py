"""Settings: defaults merged with a JSON file; a damaged file is kept aside."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.core.params import DrafterKind, PolicyName
from app.paths import app_paths
from app.storage.settings import LIMITS, RECENT_LIMIT, Settings, SettingsStore
from tests.storage.damage import SETTINGS_DAMAGE


def store(tmp_path) -> SettingsStore:
    return SettingsStore(app_paths(tmp_path).settings_file)


def test_missing_file_gives_defaults(tmp_path):
    s = store(tmp_path)
    assert s.load() == Settings() and s.problem is None


def test_saved_settings_come_back(tmp_path):
    s = store(tmp_path)
    saved = replace(Settings(), temperature=0.2, draft_max=5, main_model="/m/a.gguf", recent_main=("/m/a.gguf",),
                    drafter="lookup", draft_policy="fixed")
    s.save(saved)
    assert store(tmp_path).load() == saved


def test_file_values_are_merged_over_defaults_and_bad_values_reported(tmp_path):
    s = store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_text(json.dumps({"top_k": 12, "temperature": 1, "seed": "seven", "unknown": 3,
                                  "drafter": "telepathy", "draft_policy": "bogus", "recent_drafts": ["/d.gguf", 4]}))
    loaded = s.load()
    assert loaded.top_k == 12 and loaded.temperature == 1.0
    assert loaded.seed == Settings().seed and loaded.drafter == "lookup+model" and loaded.draft_policy == "auto"
    assert loaded.recent_drafts == ("/d.gguf",)
    assert 'seed = "seven"' in s.problem and 'drafter = "telepathy"' in s.problem and "bogus" in s.problem
    assert "unknown" not in s.problem and "top_k" not in s.problem
    assert f"(allowed: {', '.join(DrafterKind.values())})" in s.problem
    assert f"(allowed: {', '.join(PolicyName.values())})" in s.problem


def test_stored_choices_come_back_as_their_kinds(tmp_path):
    s = store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_text(json.dumps({"drafter": "lookup", "draft_policy": "pmin"}))
    loaded = s.load()
    assert loaded.drafter is DrafterKind.LOOKUP and loaded.draft_policy is PolicyName.PMIN
    assert loaded.speculation().policy is PolicyName.PMIN
    s.save(loaded)
    assert json.loads(s.path.read_text())["drafter"] == "lookup"


def test_corrupt_file_is_renamed_aside_and_defaults_used(tmp_path):
    s = store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_text("{ not json")
    assert s.load() == Settings()
    kept = list(s.path.parent.glob("settings.json.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_text() == "{ not json"
    assert not s.path.exists() and "kept as" in s.problem


def test_recent_lists_are_most_recent_first_without_duplicates(tmp_path):
    settings = Settings()
    for i in range(RECENT_LIMIT + 3):
        settings = settings.with_recent_main(f"/m/{i}.gguf")
    settings = settings.with_recent_main("/m/5.gguf")
    assert settings.recent_main[0] == "/m/5.gguf"
    assert len(settings.recent_main) == RECENT_LIMIT and len(set(settings.recent_main)) == RECENT_LIMIT


def test_settings_build_engine_parameters():
    s = replace(Settings(), seed=-1, threads=0, draft_min=9, draft_max=4, main_gpu_layers=-1, n_ctx=1024)
    assert s.sampling().seed is None and s.main_params("/m.gguf").n_threads is None
    assert s.speculation().draft_min == 4  # never more than draft max
    assert s.main_params("/m.gguf").n_gpu_layers == -1 and s.draft_params("/d.gguf").n_ctx == 1024
    assert replace(s, seed=3).sampling().seed == 3


@pytest.mark.parametrize("kind", SETTINGS_DAMAGE)
def test_damaged_or_invalid_settings_give_valid_settings_and_say_so(tmp_path, kind):
    content, said = SETTINGS_DAMAGE[kind]
    s = store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_bytes(content)
    loaded = s.load()
    assert said in s.problem
    for name, (low, high) in LIMITS.items():
        assert getattr(loaded, name) == "auto" or low <= getattr(loaded, name) <= high
    assert loaded.generation_problem() == ""
    kept = list(s.path.parent.glob("settings.json.corrupt-*"))
    if said == "damaged":
        assert [k.read_bytes() for k in kept] == [content] and "kept as" in s.problem
    else:  # a valid file with some bad values stays; the next save rewrites it
        assert not kept and s.path.read_bytes() == content


def test_out_of_range_values_fall_back_one_by_one(tmp_path):
    s = store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_text(json.dumps({"draft_max": -1, "p_min": 5, "top_k": 7, "temperature": 1e308,
                                  "max_tokens": 10**400, "min_p": 0.5}))
    loaded = s.load()
    defaults = Settings()
    assert (loaded.draft_max, loaded.p_min, loaded.temperature, loaded.max_tokens) == \
        (defaults.draft_max, defaults.p_min, defaults.temperature, defaults.max_tokens)
    assert loaded.top_k == 7 and loaded.min_p == 0.5
    assert "draft_max = -1 (allowed: 0 to 64)" in s.problem and "p_min = 5" in s.problem


def test_a_damaged_file_in_a_read_only_folder_is_left_alone(tmp_path, monkeypatch):
    s = store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_bytes(b"\xff\xfe not json")

    def read_only(self, target):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(Path, "replace", read_only)
    assert s.load() == Settings()
    assert "could not be moved aside" in s.problem and s.path.read_bytes() == b"\xff\xfe not json"


def test_settings_that_cannot_make_a_request_are_named():
    assert "cannot be used" in replace(Settings(), p_min=5.0).generation_problem()
    assert Settings().generation_problem() == ""


def test_gpu_layers_default_to_auto_and_keep_a_chosen_number(tmp_path):
    assert Settings().main_gpu_layers == "auto" == Settings().draft_gpu_layers
    assert Settings().main_params("/m.gguf").n_gpu_layers == "auto"
    s = store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_text(json.dumps({"main_gpu_layers": 20, "draft_gpu_layers": "lots"}))
    loaded = s.load()
    assert loaded.main_gpu_layers == 20 and loaded.draft_gpu_layers == "auto"
    s.save(replace(loaded, draft_gpu_layers=-1))
    assert store(tmp_path).load().draft_gpu_layers == -1
