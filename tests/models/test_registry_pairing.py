"""Import, registry metadata, delete; memory estimates; draft ranking; the catalog of pairs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.core.errors import ModelFileError
from app.core.gguf.info import read_gguf_info
from app.core.gguf.pair_check import OTHER_VOCABULARY_NOTE
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.models.catalog import default_catalog_path, find_pair, load_catalog, CatalogError
from app.models.memory import MachineMemory, estimate_memory, judge_fit, machine_memory
from app.models.pairing import family_name, rank_drafts
from app.models.registry import ModelRegistry, RegistryError, find_hf_cache_models


@pytest.fixture
def source_models(tmp_path):
    d = tmp_path / "elsewhere"
    return {
        "main": write_tiny_model(d / "tiny-main-F32.gguf", TinySpec(seed=0, n_layer=4, name="Tiny Chat 2M")),
        "draft": write_tiny_model(d / "tiny-draft-F32.gguf", TinySpec(seed=1, name="Tiny Chat 1M")),
        "cousin": write_tiny_model(d / "cousin-F32.gguf", TinySpec(seed=3, name="Cousin 1M")),
        "other_vocab": write_tiny_model(d / "other-F32.gguf", TinySpec(seed=2, other_vocab=True, name="Other")),
        "bigger": write_tiny_model(d / "bigger-F32.gguf", TinySpec(seed=4, n_layer=6, name="Tiny Chat 3M")),
        "assistant": write_tiny_model(d / "assistant-F32.gguf", TinySpec(architecture="gemma4-assistant",
                                                                         name="Gemma Assistant")),
    }


def test_import_copy_lists_gguf_metadata(models_dir, source_models):
    registry = ModelRegistry(models_dir)
    model = registry.import_file(source_models["main"], "copy")
    assert model.path.parent == models_dir / "imported"
    assert model.path.read_bytes() == source_models["main"].read_bytes()
    assert not model.path.is_symlink()
    (listed,) = registry.list()
    info = listed.info
    assert listed.source == "copy" and listed.error is None
    assert info.architecture == "llama"
    assert info.quantization == "F32"
    assert info.context_length == 2048
    assert info.vocab_type == "llama" and info.vocab_size == len(read_gguf_info(source_models["main"]).tokens)
    assert info.chat_template
    assert info.parameter_count > 0
    assert listed.size == source_models["main"].stat().st_size
    assert registry.total_disk_used() == listed.size


def test_import_link_and_delete_leave_the_original(models_dir, source_models):
    registry = ModelRegistry(models_dir)
    model = registry.import_file(source_models["draft"], "link")
    assert model.path.is_symlink() or os.path.samefile(model.path, source_models["draft"])
    assert registry.total_disk_used() == 0, "a link takes no space in the models folder"
    message = registry.remove(model.path)
    assert "link" in message
    assert source_models["draft"].exists()
    assert registry.list() == []


def test_delete_removes_the_copy_and_its_empty_folder(models_dir, source_models):
    registry = ModelRegistry(models_dir)
    model = registry.import_file(source_models["main"])
    assert "Deleted" in registry.remove(model.path)
    assert not model.path.exists() and not (models_dir / "imported").exists()
    assert source_models["main"].exists()
    with pytest.raises(RegistryError, match="not an installed model"):
        registry.remove(model.path)


def test_import_refuses_bad_files_and_duplicates(models_dir, source_models, tmp_path):
    registry = ModelRegistry(models_dir)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        registry.import_file(junk)
    with pytest.raises(ModelFileError, match="not found"):
        registry.import_file(tmp_path / "missing.gguf")
    registry.import_file(source_models["main"])
    with pytest.raises(RegistryError, match="already installed"):
        registry.import_file(source_models["main"])
    with pytest.raises(RegistryError, match="already in the models folder"):
        registry.import_file(registry.list()[0].path)
    assert len(registry.list()) == 1


def test_truncated_file_is_listed_with_its_error(models_dir, source_models):
    data = source_models["main"].read_bytes()
    (models_dir / "cut.gguf").write_bytes(data[: len(data) // 2])
    (listed,) = ModelRegistry(models_dir).list()
    assert listed.info is None and "truncated" in listed.error


def test_registry_survives_a_corrupt_index(models_dir, source_models):
    registry = ModelRegistry(models_dir)
    registry.import_file(source_models["main"])
    registry.registry_file.write_text("{not json", encoding="utf-8")
    (listed,) = registry.list()
    assert listed.source == "found" and listed.usable
    assert registry.registry_file.with_suffix(".corrupt.json").exists()


def test_hf_cache_models_are_found_and_referenced(models_dir, tmp_path, source_models):
    cache = tmp_path / "hf-cache"
    snapshot = cache / "models--someone--Tiny-GGUF" / "snapshots" / ("c" * 40)
    blobs = cache / "models--someone--Tiny-GGUF" / "blobs"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (cache / "models--someone--Tiny-GGUF" / "refs").mkdir()
    (cache / "models--someone--Tiny-GGUF" / "refs" / "main").write_text("c" * 40)
    blob = blobs / ("d" * 64)
    blob.write_bytes(source_models["draft"].read_bytes())
    (snapshot / "tiny-Q8_0.gguf").symlink_to(blob)
    (snapshot / "README.md").write_text("hi")
    (found,) = find_hf_cache_models(cache)
    assert found.repo_id == "someone/Tiny-GGUF" and found.path.name == "tiny-Q8_0.gguf"
    registry = ModelRegistry(models_dir)
    registry.add_external(found.path, "hf-cache", found.repo_id)
    (listed,) = registry.list()
    assert listed.source == "hf-cache" and listed.external and listed.usable
    assert "stays in the Hugging Face cache" in registry.remove(listed.path)
    assert blob.exists() and registry.list() == []
    assert find_hf_cache_models(tmp_path / "no-cache-here") == []


# --- memory -----------------------------------------------------------------------------------------

def test_memory_estimate_counts_weights_and_kv_cache(source_models):
    info = read_gguf_info(source_models["main"])
    small = estimate_memory(info, 512)
    full = estimate_memory(info, 2048)
    assert small.weights == full.weights == info.file_size
    assert full.kv_cache == info.kv_bytes_per_token() * 2048 > 0
    assert full.total > small.total
    assert estimate_memory(info, 100_000).n_ctx == 2048, "context is capped at what the model was trained for"


@pytest.mark.parametrize("needed, verdict", [(4, "fits"), (11, "tight"), (15, "too large")])
def test_fit_verdict_against_ram(needed, verdict):
    machine = MachineMemory(16 * 10**9, 12 * 10**9, False, None, None)
    assert judge_fit(needed * 10**9, machine).verdict == verdict


def test_fit_uses_vram_when_llama_cpp_can_offload():
    machine = MachineMemory(64 * 10**9, 60 * 10**9, True, 8 * 10**9, 7 * 10**9, "RTX 4060")
    assert judge_fit(5 * 10**9, machine).verdict == "fits"
    partial = judge_fit(12 * 10**9, machine)
    assert partial.verdict == "tight" and "partial GPU offload" in partial.detail and "VRAM" in partial.detail
    assert judge_fit(60 * 10**9, machine).verdict == "too large"
    assert "RTX 4060" in machine.describe() and "free" in machine.describe()


def test_this_machine_has_some_ram():
    machine = machine_memory()
    assert machine.ram_total and machine.ram_total > 10**8
    assert "RAM" in machine.describe()


# --- pairing ------------------------------------------------------------------------------------------

def test_family_names_ignore_size_tuning_and_quantization():
    class Info:
        def __init__(self, name):
            self.name, self.path, self.architecture = name, "/m/x.gguf", "qwen2"

    assert family_name(Info("Qwen2.5 Coder 7B Instruct")) == family_name(Info("Qwen2.5-Coder-0.5B-Instruct"))
    assert family_name(Info("Qwen2.5 7B Instruct")) != family_name(Info("Qwen2.5 Coder 0.5B Instruct"))
    assert family_name(Info("gemma-3-27b-it")) == family_name(Info("Gemma 3 1b It")) == "gemma-3"


def test_pairing_ranks_compatible_drafts_and_explains_the_others(models_dir, source_models):
    registry = ModelRegistry(models_dir)
    for path in source_models.values():
        registry.import_file(path)
    installed = registry.list()
    main = next(m for m in installed if m.name == "tiny-main-F32.gguf")
    result = rank_drafts(main, installed)
    ranked = [c.model.name for c in result.compatible]
    assert ranked == ["tiny-draft-F32.gguf", "cousin-F32.gguf", "other-F32.gguf", "bigger-F32.gguf"], \
        "same family first, then other families, then another vocabulary, then drafts not smaller than the main model"
    assert result.compatible[0].kinship == 2 and "same family" in result.compatible[0].reason()
    assert "same vocabulary" in result.compatible[1].reason()
    assert OTHER_VOCABULARY_NOTE in result.compatible[2].reason() and result.compatible[2].check.other_vocabulary
    assert "not smaller" in result.compatible[-1].reason()
    (bad,) = result.incompatible
    assert bad.model.name == "assistant-F32.gguf"
    assert "MTP drafter for gemma4 models" in bad.reason()
    assert main.path not in [c.model.path for c in result.compatible + result.incompatible]


def test_a_draft_of_another_vocabulary_is_chosen_only_where_none_of_the_main_models_own_is(models_dir, tmp_path):
    from app.models.pairing import best_draft

    d = tmp_path / "vocabularies"
    registry = ModelRegistry(models_dir)
    main, draft, other, bpe = (registry.import_file(write_tiny_model(d / name, spec)) for name, spec in (
        ("tiny-main-F32.gguf", TinySpec(seed=0, n_layer=4, name="Tiny Chat 2M")),
        ("tiny-draft-F32.gguf", TinySpec(seed=1, n_layer=2, name="Tiny Chat 1M")),
        ("other-F32.gguf", TinySpec(seed=2, n_layer=3, other_vocab=True, name="Other")),
        ("bpe-F32.gguf", TinySpec(seed=5, n_layer=1, bpe_vocab=True, name="Byte Pair"))))
    installed = registry.list()
    main = next(m for m in installed if m.name == main.name)
    ranked = rank_drafts(main, installed).compatible
    # the smallest draft is of another vocabulary: it ranks after the main model's own
    assert [c.model.name for c in ranked] == ["tiny-draft-F32.gguf", "bpe-F32.gguf", "other-F32.gguf"]
    assert [c.check.other_vocabulary for c in ranked] == [False, True, True]
    assert best_draft(main, installed).name == "tiny-draft-F32.gguf"
    # a main model of a vocabulary no other model shares: the smallest draft of another vocabulary
    other = next(m for m in installed if m.name == other.name)
    assert best_draft(other, installed).name == "bpe-F32.gguf"
    assert OTHER_VOCABULARY_NOTE in rank_drafts(other, installed).compatible[0].reason()


def test_unreadable_models_are_incompatible_with_the_reason(models_dir, source_models):
    registry = ModelRegistry(models_dir)
    registry.import_file(source_models["main"])
    (models_dir / "broken.gguf").write_bytes(b"GGUF" + b"\x00" * 10)
    installed = registry.list()
    main = next(m for m in installed if m.usable)
    (bad,) = rank_drafts(main, installed).incompatible
    assert bad.model.name == "broken.gguf" and bad.reason()


# --- catalog -------------------------------------------------------------------------------------------

def test_every_catalog_pair_names_a_main_and_a_smaller_draft_of_the_same_family():
    pairs = load_catalog()
    assert len(pairs) >= 8
    for pair in pairs:
        assert pair.main.family == pair.draft.family == pair.family, pair.id
        assert pair.main.filename.endswith(".gguf") and pair.draft.filename.endswith(".gguf")
        assert pair.main.repo_id.count("/") == 1 and pair.draft.repo_id.count("/") == 1
        assert pair.self_drafting or pair.draft.size_gb < pair.main.size_gb / 3, pair.id   # MTP heads: no draft file
        assert pair.expected_memory_gb > sum(m.size_gb for m in pair.models), pair.id
    assert len({p.id for p in pairs}) == len(pairs)
    assert find_pair(pairs, "llama-3.1-8b").draft.filename == "Llama-3.2-1B-Instruct-Q8_0.gguf"
    with pytest.raises(CatalogError, match="No recommended pair"):
        find_pair(pairs, "nope")


def test_catalog_file_names_state_the_quantization():
    from app.models.hub import quantization_from_name

    data = json.loads(default_catalog_path().read_text())
    for entry in data["pairs"]:
        for role in ("main", "draft"):
            if entry[role] is not None:   # "draft": null where the main drafts with its MTP heads
                assert quantization_from_name(entry[role]["filename"]) in ("Q4_K_M", "Q4_0", "Q8_0"), entry[role]


def test_malformed_catalog_is_a_clear_error(tmp_path):
    bad = tmp_path / "catalog.json"
    bad.write_text('{"pairs": [{"id": "x"}]}')
    with pytest.raises(CatalogError, match="malformed"):
        load_catalog(bad)
    with pytest.raises(CatalogError, match="missing"):
        load_catalog(tmp_path / "none.json")


def test_catalog_pair_found_installed_after_download_location(models_dir):
    pair = load_catalog()[0]
    target = models_dir / pair.draft.repo_id / pair.draft.filename
    target.parent.mkdir(parents=True)
    write_tiny_model(target)
    assert pair.draft.find_installed(models_dir, []) == target
    assert pair.main.find_installed(models_dir, ModelRegistry(models_dir).list()) is None
    assert isinstance(target, Path)


def _installed_all(models_dir, source_models, names):
    registry = ModelRegistry(models_dir)
    for name in names:
        registry.import_file(source_models[name], "copy")
    by_file = {m.name: m for m in registry.list()}
    return {name: by_file[source_models[name].name] for name in names}


def test_the_app_chooses_the_largest_main_that_fits_and_its_best_draft(models_dir, source_models):
    from app.models.pairing import choose_pair

    models = _installed_all(models_dir, source_models, ["main", "draft", "cousin", "other_vocab", "bigger"])
    roomy = MachineMemory(24 * 2**30, 20 * 2**30, False, None, None)
    main, draft = choose_pair(list(models.values()), roomy, 256)
    assert main.name == models["bigger"].name                      # the largest of them all fits
    assert draft.name == models["draft"].name                      # same family, smallest, same vocabulary
    # a machine on which the largest does not fit comfortably: the next one down, with its draft
    need = {k: estimate_memory(m.info, 256, m.size).total for k, m in models.items()}
    tight = MachineMemory(int((need["bigger"] - 1) / 0.6), None, False, None, None)
    main, draft = choose_pair(list(models.values()), tight, 256)
    assert main.name == models["main"].name and draft.name == models["draft"].name
    # nothing fits: the user chooses
    assert choose_pair(list(models.values()), MachineMemory(1000, None, False, None, None), 256) is None


def test_a_main_of_another_vocabulary_gets_a_draft_through_text_and_a_gpu_decides_what_fits(models_dir,
                                                                                            source_models):
    from app.core.llama.placement import SAFETY_MARGIN_BYTES, SAFETY_MARGIN_FRACTION, usable_bytes
    from app.models.pairing import best_draft, choose_pair

    models = _installed_all(models_dir, source_models, ["main", "draft", "bigger", "other_vocab"])
    # no draft shares its vocabulary: the smaller one of another drafts for it, through text
    assert best_draft(models["other_vocab"], list(models.values())).name == models["draft"].name
    need = {k: estimate_memory(m.info, 256, m.size).total for k, m in models.items()}
    # plenty of RAM, but a GPU whose memory holds the main model and not the bigger one: the GPU decides
    vram = int((need["main"] + SAFETY_MARGIN_BYTES) / (1 - SAFETY_MARGIN_FRACTION)) + 2
    assert need["main"] <= usable_bytes(vram) < need["bigger"]
    gpu = MachineMemory(64 * 2**30, 60 * 2**30, True, vram, vram)
    main, draft = choose_pair(list(models.values()), gpu, 256)
    assert main.name == models["main"].name and draft.name == models["draft"].name


def test_an_import_loads_the_first_start_pair_or_the_largest_imported_model_when_none_fits(models_dir,
                                                                                          source_models):
    """Issue 41, fault 1: the window's import chooses a pair as a first start does; where nothing fits
    comfortably it still loads what was imported (the largest, with its best draft) and says it may not fit."""
    from app.models.pairing import first_pair, imported_pair

    models = _installed_all(models_dir, source_models, ["other_vocab", "draft", "main"])
    installed = list(models.values())
    roomy = MachineMemory(24 * 2**30, 20 * 2**30, False, None, None)
    assert imported_pair(installed, installed, roomy, 256) == first_pair(installed, roomy, 256)
    choice = imported_pair(installed, installed, MachineMemory(1000, None, False, None, None), 256)
    assert (choice.main_path, choice.draft_path) == (str(models["main"].path), str(models["draft"].path))
    assert "may not fit" in choice.note
    assert imported_pair(installed, [], MachineMemory(1000, None, False, None, None), 256) is None
