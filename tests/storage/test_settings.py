"""Settings: defaults merged with a JSON file; a damaged file is kept aside."""

from __future__ import annotations

import json
from dataclasses import replace

from app.paths import app_paths
from app.storage.settings import RECENT_LIMIT, Settings, SettingsStore


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


def test_file_values_are_merged_over_defaults_and_bad_values_ignored(tmp_path):
    s = store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_text(json.dumps({"top_k": 12, "temperature": 1, "seed": "seven", "unknown": 3,
                                  "drafter": "telepathy", "draft_policy": "bogus", "recent_drafts": ["/d.gguf", 4]}))
    loaded = s.load()
    assert loaded.top_k == 12 and loaded.temperature == 1.0
    assert loaded.seed == Settings().seed and loaded.drafter == "lookup+model" and loaded.draft_policy == "auto"
    assert loaded.recent_drafts == ("/d.gguf",)
    assert s.problem is None


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
