"""The recommended pairs in resources/catalog.json: that the file parses, that each draft shares its
main model's tokenizer family, that MTP pairs are marked one consistent way, that every download
names a plausible repository and a quantized GGUF file, that "suits" says something the app knows,
and that the older pairs the catalog keeps are still there. Then how the app reads and shows a pair
that drafts with MTP, and that the loader rejects a catalog that breaks these rules."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.gui.models.manager.catalog_tab import CatalogTab, installed_state, pair_choice
from app.models.catalog import (DRAFTERS, ENGINE_SUPPORTS, MODEL_KINDS, SUITS, CatalogError, CatalogModel,
                                CatalogPair, default_catalog_path, describe_suits, find_pair, load_catalog)
from app.models.download import local_path
from app.models.hub import quantization_from_name
from app.models.memory import Fit

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")

# The pairs this catalog had before current-generation models came in, which it keeps, with the exact
# files they download (a renamed file would be a failed download for someone who has the old one).
KEPT = {
    "qwen2.5-coder-7b": ("bartowski/Qwen2.5-Coder-7B-Instruct-GGUF", "Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf",
                         "lmstudio-community/Qwen2.5-Coder-0.5B-Instruct-GGUF", "Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf"),
    "qwen2.5-coder-14b": ("bartowski/Qwen2.5-Coder-14B-Instruct-GGUF", "Qwen2.5-Coder-14B-Instruct-Q4_K_M.gguf",
                          "lmstudio-community/Qwen2.5-Coder-0.5B-Instruct-GGUF", "Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf"),
    "qwen2.5-coder-32b": ("bartowski/Qwen2.5-Coder-32B-Instruct-GGUF", "Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf",
                          "lmstudio-community/Qwen2.5-Coder-0.5B-Instruct-GGUF", "Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf"),
    "llama-3.1-8b": ("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
                     "bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q8_0.gguf"),
    "gemma-3-12b": ("bartowski/google_gemma-3-12b-it-GGUF", "google_gemma-3-12b-it-Q4_K_M.gguf",
                    "bartowski/google_gemma-3-1b-it-GGUF", "google_gemma-3-1b-it-Q8_0.gguf"),
    "gemma-3-27b": ("bartowski/google_gemma-3-27b-it-GGUF", "google_gemma-3-27b-it-Q4_K_M.gguf",
                    "bartowski/google_gemma-3-1b-it-GGUF", "google_gemma-3-1b-it-Q8_0.gguf"),
}


def raw_pairs() -> list[dict]:
    return json.loads(default_catalog_path().read_text(encoding="utf-8"))["pairs"]


def files(entry: dict) -> list[dict]:
    return [entry["main"]] + ([entry["draft"]] if entry["draft"] is not None else [])


# --- the catalog file ------------------------------------------------------------------------------

def test_the_catalog_parses_with_unique_ids():
    pairs = load_catalog()
    assert len(pairs) == len(raw_pairs()) >= 12
    assert len({p.id for p in pairs}) == len(pairs)
    assert all(isinstance(p, CatalogPair) for p in pairs)


@pytest.mark.parametrize("entry", raw_pairs(), ids=lambda e: e["id"])
def test_main_and_draft_share_the_pairs_tokenizer_family(entry):
    assert entry["main"]["family"] == entry["family"]
    if entry["draft"] is not None:
        assert entry["draft"]["family"] == entry["family"], "a draft must share its main model's vocabulary"


@pytest.mark.parametrize("entry", raw_pairs(), ids=lambda e: e["id"])
def test_mtp_pairs_are_marked_one_consistent_way(entry):
    drafter, main, draft = entry.get("drafter", "model"), entry["main"], entry["draft"]
    assert drafter in DRAFTERS
    assert main.get("kind", "model") == "model"
    if drafter == "model":
        assert draft is not None and draft.get("kind", "model") == "model"
        assert not main.get("mtp_heads"), "a main with MTP heads belongs in an MTP pair"
    elif draft is None:   # the main drafts with the MTP layers its GGUF keeps
        assert main.get("mtp_heads") is True
    else:                 # a separate MTP drafter (Gemma 4's "assistant")
        assert draft["kind"] == "mtp-drafter"
        assert draft["size_gb"] < main["size_gb"] / 10
    for model in files(entry):
        assert model.get("kind", "model") in MODEL_KINDS


@pytest.mark.parametrize("entry", raw_pairs(), ids=lambda e: e["id"])
def test_downloads_name_a_repository_and_a_quantized_gguf(entry):
    for model in files(entry):
        assert REPO_ID.match(model["repo_id"]), model["repo_id"]
        assert model["filename"].endswith(".gguf") and "/" not in model["filename"], model["filename"]
        assert quantization_from_name(model["filename"]) != "?", f"{model['filename']} states no quantization"
        assert 0 < model["size_gb"] < entry["expected_memory_gb"]


@pytest.mark.parametrize("entry", raw_pairs(), ids=lambda e: e["id"])
def test_suits_says_something_the_app_knows(entry):
    suits = entry["suits"]
    assert suits and set(suits) <= set(SUITS) and len(set(suits)) == len(suits)
    assert {"cpu", "gpu"} & set(suits), "a pair suits a CPU, a GPU or both"
    if "moe" in suits:
        assert re.search(r"\d+B-A\d+B", entry["main"]["filename"]), "moe marks a mixture-of-experts main"


def test_the_older_pairs_are_kept_with_the_same_files():
    pairs = {p.id: p for p in load_catalog()}
    for pair_id, (main_repo, main_file, draft_repo, draft_file) in KEPT.items():
        pair = pairs[pair_id]
        assert (pair.main.repo_id, pair.main.filename) == (main_repo, main_file), pair_id
        assert (pair.draft.repo_id, pair.draft.filename) == (draft_repo, draft_file), pair_id
        assert pair.drafter == "model" and pair.can_speculate, pair_id


def test_the_current_generation_is_offered():
    pairs = {p.id: p for p in load_catalog()}
    llama = pairs["llama-3.3-70b"]
    assert "Llama-3.3-70B" in llama.main.filename and llama.draft.filename == "Llama-3.2-1B-Instruct-Q8_0.gguf"
    qwen_draft = [p for p in pairs.values() if p.draft.filename.startswith("Qwen3.5-0.8B")]
    assert qwen_draft and all(p.main.filename.startswith("Qwen3.5-") and p.drafter == "model" for p in qwen_draft)
    qwen_mtp = [p for p in pairs.values() if p.self_drafting]
    assert {p.main.filename.split("-")[0] for p in qwen_mtp} == {"Qwen3.6"}
    assert any("moe" in p.suits for p in qwen_mtp), "the MoE main carries its note"
    gemma = [p for p in pairs.values() if p.family == "gemma-4"]
    assert gemma and all(p.drafter == "mtp" and p.draft.kind == "mtp-drafter" for p in gemma)


# --- how the app reads and shows a pair -------------------------------------------------------------

def test_a_main_that_drafts_for_itself_is_one_file_and_says_what_it_needs():
    pair = find_pair(load_catalog(), "qwen3.6-27b-mtp")
    assert pair.self_drafting and pair.draft_file is None and pair.models == (pair.main,)
    assert pair.draft == pair.main, "code written for two files finds and downloads the main once"
    assert pair.download_size == int(pair.main.size_gb * 1e9)
    assert pair.needs == ("mtp", "rollback") and pair.main.mtp_heads and pair.main.recurrent
    assert pair.can_speculate and pair.drafting == "drafts with its MTP heads"   # --drafter mtp


def test_an_mtp_drafter_is_a_second_file_the_app_drafts_with():
    pair = find_pair(load_catalog(), "gemma-4-31b-mtp")
    assert not pair.self_drafting and pair.draft_file is pair.draft and len(pair.models) == 2
    assert pair.needs == ("mtp-drafter",) and pair.can_speculate
    assert pair.drafting == "drafts with its 0.5B MTP drafter"


def test_a_pair_needing_what_the_engine_lacks_says_so(monkeypatch):
    monkeypatch.setattr("app.models.catalog.ENGINE_SUPPORTS", frozenset({"rollback", "mtp"}))
    pair = find_pair(load_catalog(), "gemma-4-31b-mtp")
    assert not pair.can_speculate and pair.drafting.endswith("(needs MTP drafting with a drafter file)")
    main, draft = Path("main.gguf"), Path("draft.gguf")
    chosen_main, chosen_draft, note = pair_choice(pair, main, draft)
    assert (chosen_main, chosen_draft) == (str(main), "") and "needs MTP drafting with a drafter file" in note


def test_a_hybrid_qwen_main_needs_a_recurrent_rollback_to_speculate():
    pair = find_pair(load_catalog(), "qwen3.5-9b")
    assert pair.main.recurrent and pair.draft.recurrent and pair.needs == ("rollback",)
    supported = "rollback" in ENGINE_SUPPORTS
    assert pair.can_speculate == supported
    assert pair.drafting == "0.8B draft model" + ("" if supported else " (needs recurrent-state rollback)")


def test_suits_read_as_one_short_phrase():
    assert describe_suits(("cpu", "gpu")) == "suits a CPU or a GPU"
    assert describe_suits(["gpu"]) == "suits a GPU"
    assert describe_suits(("gpu", "moe")) == "suits a GPU; MoE main: speculation often does not pay"
    assert find_pair(load_catalog(), "llama-3.3-70b").suits_text == "suits a GPU"


def test_use_pair_loads_what_the_pair_drafts_with(tmp_path):
    pairs = load_catalog()
    main, draft = tmp_path / "main.gguf", tmp_path / "draft.gguf"
    assert pair_choice(find_pair(pairs, "llama-3.1-8b"), main, draft) == (str(main), str(draft), "")
    # an MTP drafter is the pair's draft: the window drafts with MTP when it is chosen
    assert pair_choice(find_pair(pairs, "gemma-4-31b-mtp"), main, draft) == (str(main), str(draft), "")
    # a main that drafts for itself: the main alone, which the window drafts for with its MTP heads
    assert pair_choice(find_pair(pairs, "qwen3.6-27b-mtp"), main, None) == (str(main), "", "")
    assert installed_state(find_pair(pairs, "qwen3.6-27b-mtp"), main, None) == "yes"
    assert installed_state(find_pair(pairs, "gemma-4-31b-mtp"), main, None) == "main"


class _Session:
    """What the catalog tab asks of a ManagerSession before anything is downloaded."""

    def __init__(self, models_dir: Path):
        self.paths = type("Paths", (), {"models_dir": models_dir})()

    def fit(self, needed: int) -> Fit:
        return Fit("fits", f"{needed:,} bytes, plenty of room")

    def speed(self, _pair) -> None:
        return None   # this machine's cores unknown: no speed said


def test_the_catalog_tab_shows_how_each_pair_drafts_and_what_it_suits(qtbot, tmp_path):
    pairs = load_catalog()
    tab = CatalogTab(_Session(tmp_path), pairs)
    qtbot.addWidget(tab)
    mtp = find_pair(pairs, "qwen3.6-27b-mtp")
    target = local_path(tmp_path, mtp.main.repo_id, mtp.main.filename)
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF")
    tab.set_models([])
    headers = [tab.table.horizontalHeaderItem(c).text() for c in range(tab.table.columnCount())]
    assert headers[5] == "Installed" and headers[6:] == ["Drafts with", "Suits"]
    row = [p.id for p in pairs].index(mtp.id)
    assert tab.table.item(row, 5).text() == "yes"
    assert tab.table.item(row, 6).text() == mtp.drafting   # "drafts with its MTP heads"
    assert tab.table.item(row, 7).text() == "suits a GPU"
    tab.table.selectRow(row)
    assert "Draft: none" in tab.details.text() and "Suits a GPU." in tab.details.text()
    with qtbot.waitSignal(tab.chosen) as chosen:
        tab.use_selected_pair()
    assert chosen.args == [str(target), ""], "no separate draft: the main runs alone, or drafts for itself"


# --- the loader rejects a catalog that breaks the rules ------------------------------------------------

def _model(**over) -> dict:
    return {"repo_id": "someone/Some-GGUF", "filename": "some-Q4_K_M.gguf", "family": "f", "params": "1B",
            "size_gb": 1.0} | over


def _catalog(tmp_path, **pair) -> Path:
    entry = {"id": "p", "title": "P", "family": "f", "main": _model(size_gb=8.0), "draft": _model(),
             "expected_memory_gb": 10.0} | pair
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"pairs": [entry]}))
    return path


@pytest.mark.parametrize("broken", [
    {"draft": _model(family="other")},                                      # another vocabulary
    {"main": _model(family="other", size_gb=8.0)},
    {"draft": None},                                                        # no draft, not an MTP pair
    {"draft": None, "drafter": "mtp"},                                      # ... nor a main with MTP heads
    {"drafter": "mtp"},                                                     # MTP pair with an ordinary draft
    {"draft": _model(kind="mtp-drafter")},                                  # MTP drafter in a classic pair
    {"drafter": "eagle"},
    {"draft": _model(kind="assistant")},
    {"main": _model(kind="mtp-drafter", size_gb=8.0), "drafter": "mtp", "draft": _model(kind="mtp-drafter")},
    {"suits": ["cpu", "tpu"]},
], ids=lambda b: json.dumps(b)[:60])
def test_a_pair_that_breaks_the_rules_is_malformed(tmp_path, broken):
    with pytest.raises(CatalogError, match="malformed"):
        load_catalog(_catalog(tmp_path, **broken))


def test_well_formed_mtp_pairs_load(tmp_path):
    [heads] = load_catalog(_catalog(tmp_path, drafter="mtp", draft=None, suits=["gpu", "moe"],
                                    main=_model(size_gb=8.0, mtp_heads=True, recurrent=True)))
    assert heads.self_drafting and heads.suits == ("gpu", "moe") and heads.needs == ("mtp", "rollback")
    [drafter] = load_catalog(_catalog(tmp_path, drafter="mtp", draft=_model(kind="mtp-drafter")))
    assert drafter.draft.kind == "mtp-drafter" and drafter.needs == ("mtp-drafter",)
    [classic] = load_catalog(_catalog(tmp_path))
    assert classic.drafter == "model" and classic.suits == () and classic.can_speculate
    assert classic.draft == CatalogModel("someone/Some-GGUF", "some-Q4_K_M.gguf", "f", "1B", 1.0)
