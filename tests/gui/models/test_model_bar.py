"""The model bar lists every installed model (the registry) in both pickers, recent files first,
without the user ever opening them; a draft of another vocabulary is offered as one, incompatible
drafts stay listed, disabled, with the reason."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QFileDialog

from app.core.gguf.pair_check import OTHER_VOCABULARY_NOTE
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.gui.models.model_bar import SHOW_HIDE, ModelBar
from app.models.registry import ModelRegistry


@pytest.fixture
def models_dir(tmp_path):
    return tmp_path / "data" / "models"


@pytest.fixture
def installed(models_dir, tmp_path):
    """A main model, a smaller same-vocabulary draft, a model with another vocabulary and an MTP drafter
    made for gemma4 models (it drafts for none of them), imported through the registry as `quickdraft
    models import` does."""
    src = tmp_path / "src"
    registry = ModelRegistry(models_dir)
    main = registry.import_file(write_tiny_model(src / "chat-main.gguf", TinySpec(seed=0, n_layer=4)))
    draft = registry.import_file(write_tiny_model(src / "chat-draft.gguf", TinySpec(seed=1)))
    other = registry.import_file(write_tiny_model(src / "other-vocab.gguf", TinySpec(seed=2, other_vocab=True)))
    assistant = registry.import_file(write_tiny_model(src / "gemma4-assistant.gguf",
                                                      TinySpec(architecture="gemma4-assistant", name="assistant")))
    return str(main.path), str(draft.path), str(other.path), str(assistant.path)


def make_bar(qtbot, models_dir) -> ModelBar:
    bar = ModelBar(models_dir)
    qtbot.addWidget(bar)
    return bar


def main_items(bar: ModelBar) -> list[str]:
    return [bar.main_combo.itemData(i) for i in range(bar.main_combo.count())]


def draft_items(bar: ModelBar) -> list[str]:
    return [bar.draft_combo.itemData(i) for i in range(1, bar.draft_combo.count())
            if bar.draft_combo.itemData(i) != SHOW_HIDE]


def toggle_incompatible(bar: ModelBar) -> None:
    """Pick the draft picker's last item, "Show N incompatible drafts…" / "Hide …", as a user does."""
    last = bar.draft_combo.count() - 1
    assert bar.draft_combo.itemData(last) == SHOW_HIDE
    bar.draft_combo.setCurrentIndex(last)


def test_installed_models_appear_in_both_pickers_without_being_opened(qtbot, models_dir, installed):
    main, draft, other, assistant = installed
    bar = make_bar(qtbot, models_dir)
    bar.set_recent([], [])
    assert sorted(main_items(bar)) == sorted(installed)
    assert bar.has_models
    bar.set_main(main)
    assert sorted(draft_items(bar)) == sorted([draft, other]), "only the drafts that can draft for it"
    assert bar.draft_combo.itemText(bar.draft_combo.count() - 1) == "Show 1 incompatible draft…"
    kept = bar.current_draft()
    toggle_incompatible(bar)
    assert sorted(draft_items(bar)) == sorted([draft, other, assistant]) and bar.current_draft() == kept
    assert bar.is_draft_item_enabled(draft) and bar.is_draft_item_enabled(other)
    assert not bar.is_draft_item_enabled(assistant)
    # another vocabulary is offered, saying what it costs
    assert bar.option_for(other).label.endswith("(different vocabulary)")
    assert OTHER_VOCABULARY_NOTE in bar.option_for(other).reason
    assert "MTP drafter for gemma4" in bar.option_for(assistant).reason
    assert "incompatible" in bar.option_for(assistant).label
    assert not bar.set_draft(assistant) and bar.set_draft(other) and bar.set_draft(draft)
    assert bar.current_draft() == draft


def test_recent_files_come_first_then_the_installed_models(qtbot, models_dir, installed, tmp_path):
    main, draft, other, assistant = installed
    elsewhere = str(write_tiny_model(tmp_path / "elsewhere" / "opened-once.gguf", TinySpec(seed=0)))
    bar = make_bar(qtbot, models_dir)
    bar.set_recent([elsewhere, draft], [])
    assert main_items(bar)[:2] == [elsewhere, draft], "recent ones first, most recent at the top"
    assert sorted(main_items(bar)[2:]) == sorted([main, other, assistant])
    assert bar.current_main() == elsewhere
    assert sorted(draft_items(bar)) == sorted([main, draft, other]), "every installed model that can draft for it"
    toggle_incompatible(bar)
    assert sorted(draft_items(bar)) == sorted(installed), "and, on asking, the others"


def test_refresh_lists_models_installed_after_the_bar_was_built(qtbot, models_dir, tmp_path):
    bar = make_bar(qtbot, models_dir)
    bar.set_recent([], [])
    assert main_items(bar) == [] and not bar.has_models
    registry = ModelRegistry(models_dir)
    main = registry.import_file(write_tiny_model(tmp_path / "src" / "later-main.gguf", TinySpec(seed=0, n_layer=4)))
    bar.refresh()
    assert main_items(bar) == [str(main.path)] and bar.current_main() == str(main.path) and bar.has_models
    draft = registry.import_file(write_tiny_model(tmp_path / "src" / "later-draft.gguf", TinySpec(seed=1)))
    bar.refresh()
    assert str(draft.path) in draft_items(bar) and bar.is_draft_item_enabled(str(draft.path))
    assert bar.set_draft(str(draft.path))
    bar.refresh()
    assert bar.current_main() == str(main.path) and bar.current_draft() == str(draft.path), "the choice is kept"


def test_browse_main_and_draft_are_public(qtbot, models_dir, installed, monkeypatch):
    main, draft, *_ = installed
    bar = make_bar(qtbot, models_dir)
    picked = iter([main, draft])
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *args, **kwargs: (next(picked), ""))
    bar.browse_main()
    assert bar.current_main() == main
    bar.browse_draft()
    assert bar.current_draft() == draft


def test_mtp_heads_are_offered_only_for_a_main_that_carries_them(qtbot, models_dir, installed, tmp_path):
    from app.core.params import DrafterKind

    bar = make_bar(qtbot, models_dir)
    mtp = bar.drafter.model().item(bar.drafter.findData(DrafterKind.MTP.value))
    bar.set_main(installed[0])
    assert not mtp.isEnabled() and "no MTP layers" in mtp.toolTip()
    bar.set_drafter(DrafterKind.MTP)
    assert bar.current_drafter() is DrafterKind.LOOKUP_MODEL
    qwen35 = write_tiny_model(tmp_path / "src" / "qwen35.gguf", TinySpec(architecture="qwen35", name="qwen35"))
    bar.set_main(str(qwen35))
    bar.set_drafter(DrafterKind.MTP)
    assert mtp.isEnabled() and bar.current_drafter() is DrafterKind.MTP
    bar.set_main(installed[0])   # back to a main without MTP layers: MTP is not left chosen
    assert bar.current_drafter() is DrafterKind.LOOKUP_MODEL
    bar.set_main(str(qwen35))    # and comes back with one that has them: the settings' choice is kept
    assert bar.current_drafter() is DrafterKind.MTP


def test_mtp_chosen_in_the_settings_survives_a_start_where_the_main_model_comes_later(qtbot, models_dir,
                                                                                     installed, tmp_path):
    from app.core.params import DrafterKind

    bar = make_bar(qtbot, models_dir)
    bar.set_drafter(DrafterKind.MTP)        # restored from the settings before any main model is known
    assert bar.current_drafter() is DrafterKind.LOOKUP_MODEL
    qwen35 = write_tiny_model(tmp_path / "src" / "qwen35.gguf", TinySpec(architecture="qwen35", name="qwen35"))
    bar.set_main(str(qwen35))
    assert bar.current_drafter() is DrafterKind.MTP


def test_an_mtp_drafter_file_is_a_draft_that_drafts_with_mtp_and_never_a_main(qtbot, models_dir, installed, tmp_path):
    """Gemma 4's assistant: listed as a draft for the main model it was made for (choosing it chooses
    MTP drafting), disabled with the reason for any other main, and never pickable as the main."""
    from app.core.params import DrafterKind

    gemma = write_tiny_model(tmp_path / "src" / "gemma4.gguf", TinySpec(architecture="gemma4", name="gemma4"))
    assistant = write_tiny_model(tmp_path / "src" / "gemma4-assistant.gguf",
                                 TinySpec(architecture="gemma4-assistant", name="gemma4-assistant"))
    bar = make_bar(qtbot, models_dir)
    bar.set_main(str(assistant))
    index = bar.main_combo.findData(str(assistant))
    assert not bar.main_combo.model().item(index).isEnabled()
    assert "(draft only)" in bar.main_combo.itemText(index)
    assert "only drafts" in bar.main_combo.itemData(index, 3)   # Qt.ToolTipRole

    bar.set_main(str(gemma))
    assert bar.current_drafter() is DrafterKind.LOOKUP_MODEL
    assert bar.set_draft(str(assistant))
    assert bar.draft_drafts_as() is DrafterKind.MTP and bar.current_drafter() is DrafterKind.MTP
    bar.set_draft("")   # no draft, and the main has no MTP layers of its own: MTP is not left chosen
    assert bar.current_drafter() is DrafterKind.LOOKUP_MODEL

    bar.set_main(installed[0])
    assert not bar.set_draft(str(assistant))
    assert "MTP drafter for gemma4 models" in bar.option_for(str(assistant)).reason


def test_eagle3_and_dflash_are_offered_with_a_drafter_file_of_their_kind_and_chosen_with_it(qtbot, models_dir,
                                                                                            tmp_path):
    """Choosing an EAGLE-3 or DFlash drafter as the draft chooses its kind; without one the entry is greyed
    out saying what it needs, and a choice of it does not outlive the drafter file."""
    from app.core.params import DrafterKind

    main = write_tiny_model(tmp_path / "src" / "llama.gguf", TinySpec())
    files = {DrafterKind.EAGLE3: write_tiny_model(tmp_path / "src" / "eagle3.gguf", TinySpec(
                 architecture="eagle3", name="tiny-eagle3", n_layer=1, target_layers=(0, 1, 1))),
             DrafterKind.DFLASH: write_tiny_model(tmp_path / "src" / "dflash.gguf", TinySpec(
                 architecture="dflash", name="tiny-dflash", n_layer=2, target_layers=(0, 1), block_size=8))}
    bar = make_bar(qtbot, models_dir)
    bar.set_main(str(main))
    for kind, path in files.items():
        item = bar.drafter.model().item(bar.drafter.findData(kind.value))
        assert not item.isEnabled() and "drafter made for the main model" in item.toolTip()
        assert bar.set_draft(str(path))
        assert item.isEnabled() and bar.draft_drafts_as() is kind and bar.current_drafter() is kind
        bar.set_draft("")
        assert not item.isEnabled() and bar.current_drafter() is DrafterKind.LOOKUP_MODEL


def test_picking_a_main_model_chooses_its_best_draft_and_says_so(qtbot, models_dir, installed, tmp_path):
    main, draft, other, _ = installed
    registry = ModelRegistry(models_dir)
    bigger = str(registry.import_file(write_tiny_model(tmp_path / "src" / "chat-big.gguf",
                                                       TinySpec(seed=5, n_layer=6))).path)
    bar = make_bar(qtbot, models_dir)
    bar.set_recent([], [])
    bar.set_main(other)
    assert bar.current_draft() == ""
    chosen = []
    bar.draft_chosen.connect(lambda *args: chosen.append(args))
    bar.main_combo.setCurrentIndex(bar.main_combo.findData(bigger))   # as the user picks it
    bar.main_combo.activated.emit(bar.main_combo.currentIndex())
    # the smallest of the same vocabulary (main is larger than draft), before the other vocabulary's
    assert bar.current_draft() == draft and chosen == [(bigger, draft, "")]
    assert bar.best_draft() == draft
    bar.set_main(other)
    assert bar.best_draft() == draft, "no draft shares its vocabulary: a smaller one of another drafts through text"


def _darkest_text(combo, row: int) -> int:
    """The darkest pixel of a row of ``combo``'s open list (red + green + blue): how dark its text is drawn."""
    from PySide6.QtGui import QColor

    combo.showPopup()
    view = combo.view()
    image = view.viewport().grab().toImage()
    rect = view.visualRect(view.model().index(row, 0)).intersected(image.rect())
    combo.hidePopup()
    return min(sum(QColor(image.pixel(x, y)).getRgb()[:3]) for x in range(rect.left(), rect.right())
               for y in range(rect.top(), rect.bottom()))


@pytest.mark.qt_log_ignore("This plugin does not support (raise|grabbing)")   # a popup, offscreen
def test_a_disabled_drafter_entry_is_drawn_greyed_out(qtbot, models_dir, installed):
    """Issue 41, fault 6: "MTP heads", disabled for a main model without MTP layers, was drawn in the same
    colour as the entries that can be chosen (the style sheet's text colour applied to every item)."""
    from app.core.params import DrafterKind

    bar = make_bar(qtbot, models_dir)
    bar.show()
    bar.set_main(installed[0])
    mtp = bar.drafter.findData(DrafterKind.MTP.value)
    lookup = bar.drafter.findData(DrafterKind.LOOKUP.value)
    assert not bar.drafter.model().item(mtp).isEnabled()
    assert _darkest_text(bar.drafter, mtp) > _darkest_text(bar.drafter, lookup) + 150


def test_drafts_of_the_main_models_vocabulary_are_listed_before_those_of_another(qtbot, models_dir, tmp_path):
    """Issue 41, fault 6: in the folder the window's import fills, Gemma (another vocabulary, named first)
    was listed above Qwen's own 0.5B draft; drafts through text are the slower kind, listed after."""
    src, registry = tmp_path / "src", ModelRegistry(models_dir)
    main = registry.import_file(write_tiny_model(src / "qwen-main.gguf", TinySpec(seed=0, n_layer=4)))
    registry.import_file(write_tiny_model(src / "gemma-270m.gguf", TinySpec(seed=2, other_vocab=True)))
    draft = registry.import_file(write_tiny_model(src / "qwen-draft.gguf", TinySpec(seed=1)))
    bar = make_bar(qtbot, models_dir)
    bar.set_main(str(main.path))
    listed = [bar.draft_combo.itemText(i) for i in range(bar.draft_combo.count())]
    assert listed == ["No draft model", "qwen-draft.gguf", "gemma-270m.gguf (different vocabulary)"]
    assert bar.best_draft() == str(draft.path)
