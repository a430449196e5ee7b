"""scripts/project_drafters.py: the projection uses the policy's own formula, so it never projects a
drafter slower than the main model alone (drafting that cannot pay is not asked for), and a block whose
tokens are all right pays more the longer it is verified."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("project_drafters", ROOT / "scripts" / "project_drafters.py")
project_drafters = importlib.util.module_from_spec(spec)
sys.modules["project_drafters"] = project_drafters
spec.loader.exec_module(project_drafters)


def test_a_drafter_that_is_never_right_projects_the_main_models_own_speed():
    profile = project_drafters.gpu_profile(0.02, 17)
    assert project_drafters.best_speedup(0.0, 8, 0.08, 0.0, profile) == (1.0, 0)
    assert project_drafters.best_speedup(0.0, 15, 0.0, 0.3, profile) == (1.0, 0)


def test_a_block_that_is_always_right_is_verified_whole_and_pays_its_length():
    profile = project_drafters.gpu_profile(0.02, 17)
    speedup, k = project_drafters.best_speedup(1.0, 15, 0.0, 0.3, profile)
    assert k == 15 and abs(speedup - 16 / (0.3 + profile.main_batch(16))) < 1e-9
