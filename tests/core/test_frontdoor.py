"""The front door's values: who drafts for a loaded pair, and a request that takes only a DrafterKind."""

from __future__ import annotations

import pytest

from app.core.frontdoor import GenerationRequest, LoadedPair
from app.core.params import DrafterKind, SpeculationParams


def pair(draft: bool = False, mtp_drafter: bool = False) -> LoadedPair:
    return LoadedPair("main", "main.gguf", draft_path="draft.gguf" if draft or mtp_drafter else None,
                      has_draft_model=draft, mtp_drafter=mtp_drafter)


@pytest.mark.parametrize("drafter, loaded, draft_max, expected", [
    (DrafterKind.LOOKUP_MODEL, pair(draft=True), 4, DrafterKind.LOOKUP_MODEL),
    (DrafterKind.LOOKUP_MODEL, pair(), 4, DrafterKind.LOOKUP),      # lookup drafts without a draft model
    (DrafterKind.LOOKUP, pair(), 4, DrafterKind.LOOKUP),
    (DrafterKind.MODEL, pair(), 4, DrafterKind.NONE),               # nobody to draft
    (DrafterKind.MODEL, pair(mtp_drafter=True), 4, DrafterKind.MTP),
    (DrafterKind.NONE, pair(draft=True), 4, DrafterKind.NONE),
    (DrafterKind.LOOKUP_MODEL, pair(draft=True), 0, DrafterKind.NONE),  # --draft-max 0: no round drafts
])
def test_who_drafts_with_the_loaded_pair(drafter, loaded, draft_max, expected):
    assert loaded.who_drafts(drafter, SpeculationParams(draft_max=draft_max)) is expected


def test_a_request_takes_a_drafter_kind_not_its_name():
    assert GenerationRequest(drafter=DrafterKind.MODEL).drafter is DrafterKind.MODEL
    with pytest.raises(TypeError):
        GenerationRequest(drafter="model")
