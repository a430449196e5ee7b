"""The front door's values: who drafts for a loaded pair, and a request that takes only a DrafterKind."""

from __future__ import annotations

import pytest

from app.core.frontdoor import GenerationRequest, LoadedPair
from app.core.params import DrafterKind, SpeculationParams


def pair(draft: bool = False, drafts_as: DrafterKind | None = None) -> LoadedPair:
    return LoadedPair("main", "main.gguf", draft_path="draft.gguf" if draft or drafts_as else None,
                      has_draft_model=draft, drafts_as=drafts_as)


@pytest.mark.parametrize("drafter, loaded, draft_max, expected", [
    (DrafterKind.LOOKUP_MODEL, pair(draft=True), 4, DrafterKind.LOOKUP_MODEL),
    (DrafterKind.LOOKUP_MODEL, pair(), 4, DrafterKind.LOOKUP),      # lookup drafts without a draft model
    (DrafterKind.LOOKUP, pair(), 4, DrafterKind.LOOKUP),
    (DrafterKind.MODEL, pair(), 4, DrafterKind.NONE),               # nobody to draft
    (DrafterKind.MODEL, pair(drafts_as=DrafterKind.MTP), 4, DrafterKind.MTP),
    (DrafterKind.LOOKUP_MODEL, pair(drafts_as=DrafterKind.EAGLE3), 4, DrafterKind.EAGLE3),
    (DrafterKind.LOOKUP, pair(drafts_as=DrafterKind.EAGLE3), 4, DrafterKind.LOOKUP),
    (DrafterKind.NONE, pair(draft=True), 4, DrafterKind.NONE),
    (DrafterKind.LOOKUP_MODEL, pair(draft=True), 0, DrafterKind.NONE),  # --draft-max 0: no round drafts
])
def test_who_drafts_with_the_loaded_pair(drafter, loaded, draft_max, expected):
    assert loaded.who_drafts(drafter, SpeculationParams(draft_max=draft_max)) is expected


def test_a_request_takes_a_drafter_kind_not_its_name():
    assert GenerationRequest(drafter=DrafterKind.MODEL).drafter is DrafterKind.MODEL
    with pytest.raises(TypeError):
        GenerationRequest(drafter="model")
