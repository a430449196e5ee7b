"""Which installed models can draft for a chosen main model, best first, and why the others cannot."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import QuickdraftError
from app.core.gguf.info import GGUFInfo, read_gguf_info
from app.core.gguf.pair_check import PairCheck, check_pair
from app.models.catalog import load_catalog
from app.models.hub import QUANT_RE, SPLIT_RE
from app.models.memory import MachineMemory, estimate_memory, judge_fit
from app.models.registry import InstalledModel

_SIZE_RE = re.compile(r"(?:^|[-_ .])(\d+x)?\d+(?:\.\d+)?[bmk](?=$|[-_ .])", re.IGNORECASE)
_NOISE_WORDS = {"instruct", "it", "chat", "base", "gguf", "hf", "pt", "model"}


@dataclass(frozen=True)
class DraftCandidate:
    model: InstalledModel
    check: PairCheck
    kinship: int          # 2 same family, 1 same lineage (architecture and maker), 0 unrelated

    @property
    def compatible(self) -> bool:
        return self.check.compatible

    def reason(self) -> str:
        if not self.compatible:
            return "; ".join(self.check.reasons)
        info = self.model.info
        if info is not None and info.is_mtp_drafter:
            return "MTP drafter made for this model: drafts with its hidden states and memory"
        if info is not None and info.is_drafter_file:
            return f"{info.hidden_state_drafter} drafter made for this model: drafts from its hidden states"
        kin = {2: "same family", 1: "related family", 0: "other family"}[self.kinship]
        if not self.check.other_vocabulary and not self.kinship:
            kin += ", same vocabulary"
        notes = "; ".join(self.check.warnings)
        return f"{kin}{'; ' + notes if notes else ''}"


@dataclass(frozen=True)
class PairingResult:
    main: InstalledModel
    compatible: tuple[DraftCandidate, ...]      # best first
    incompatible: tuple[DraftCandidate, ...]


def family_name(info: GGUFInfo) -> str:
    """``Qwen2.5 Coder 7B Instruct`` -> ``qwen2.5-coder``: the model's name without size, tuning or quant."""
    name = info.name or Path(info.path).name
    split = SPLIT_RE.match(name)
    name = split.group("stem") if split else re.sub(r"\.gguf$", "", name, flags=re.IGNORECASE)
    name = QUANT_RE.sub("", name)
    name = _SIZE_RE.sub("", name)
    words = [w for w in re.split(r"[-_ ]+", name.lower()) if w and w not in _NOISE_WORDS]
    return "-".join(words) or info.architecture


def lineage(info: GGUFInfo) -> str:
    """The maker's line of models: the family name's first letters (qwen, llama, gemma)."""
    match = re.match(r"[a-z]+", family_name(info).removeprefix("meta-"))
    return f"{info.architecture}:{match.group(0) if match else ''}"


def kinship(main: GGUFInfo, draft: GGUFInfo) -> int:
    if family_name(main) == family_name(draft):
        return 2
    return 1 if lineage(main) == lineage(draft) else 0


def rank_drafts(main: InstalledModel, installed: list[InstalledModel]) -> PairingResult:
    """Every other installed model as a draft for ``main``: compatible ones ranked (an MTP drafter made
    for it first; drafts not smaller than the main model last; among the others, drafts of its own
    vocabulary before those of another, which draft through text and are slower per accepted token;
    then same family, then smaller first), the rest with their reasons."""
    if main.info is None:
        raise ValueError(f"{main.name} cannot be read: {main.error}")
    good: list[DraftCandidate] = []
    bad: list[DraftCandidate] = []
    for model in installed:
        if model.path == main.path:
            continue
        if model.info is None:
            bad.append(DraftCandidate(model, PairCheck(False, (model.error or "unreadable file",)), 0))
            continue
        check = check_pair(main.info, model.info)
        candidate = DraftCandidate(model, check, kinship(main.info, model.info))
        (good if check.compatible else bad).append(candidate)
    good.sort(key=lambda c: (not c.model.info.is_drafter_file, c.model.size >= main.size, c.check.other_vocabulary,
                             -c.kinship, c.model.size, c.model.name))
    bad.sort(key=lambda c: c.model.name.lower())
    return PairingResult(main, tuple(good), tuple(bad))


def installed_file(path: str | Path) -> InstalledModel:
    """A model file as the pairing functions take it, wherever it lies (read, not imported)."""
    path = Path(path)
    try:
        info = read_gguf_info(path)
    except QuickdraftError as exc:
        return InstalledModel(path, (path,), 0, "found", None, None, str(exc))
    return InstalledModel(path, (path,), info.file_size, "found", None, info, None)


def best_draft(main: InstalledModel, candidates: list[InstalledModel]) -> InstalledModel | None:
    """The draft the app picks for ``main``: a drafter file made for it (MTP, EAGLE-3, DFlash: trained on
    its hidden states, they draft best), else the catalog's recommended
    draft for it when that is among ``candidates``, else the first compatible draft ``rank_drafts``
    ranks (same family first, then the smallest), as long as it is smaller than the main model; None
    when no candidate can draft for it. A draft of the main model's own vocabulary is picked where
    there is one; a draft of another vocabulary (it drafts through text) only where there is none."""
    ranked = [c for c in rank_drafts(main, candidates).compatible
              if c.model.info.is_drafter_file or c.model.size < main.size]
    own = [c.model for c in ranked if not c.check.other_vocabulary]
    compatible = own or [c.model for c in ranked]
    if not compatible:
        return None
    if compatible[0].info.is_drafter_file:
        return compatible[0]
    recommended = _catalog_drafts(main.name)
    return next((m for m in compatible if m.name in recommended), compatible[0])


def choose_pair(installed: list[InstalledModel], machine: "MachineMemory",
                n_ctx: int) -> tuple[InstalledModel, InstalledModel | None] | None:
    """What the app loads when nothing is chosen yet: the largest main model that fits this machine
    (all its layers on the GPU when there is one, else in RAM: ``judge_fit``) with ``n_ctx`` tokens
    of context, and its best draft. None when no model fits comfortably: then the user chooses."""
    mains = [m for m in installed if m.info is not None and not m.info.is_drafter_file]
    fitting = [m for m in mains
               if judge_fit(estimate_memory(m.info, n_ctx, m.size).total, machine).verdict == "fits"]
    if not fitting:
        return None
    main = max(fitting, key=lambda m: (m.size, m.name))
    return main, best_draft(main, installed)


@dataclass(frozen=True)
class FirstPair:
    """The pair the app loads at a first start, and the sentence that tells the user why."""

    main_path: str
    draft_path: str | None
    note: str


def first_pair(installed: list[InstalledModel], machine: "MachineMemory", n_ctx: int) -> FirstPair | None:
    """No pair chosen yet (a first start, or the last pair's files are gone): ``choose_pair``'s
    choice among the installed models, with what the window tells the user about it."""
    choice = choose_pair(installed, machine, n_ctx) if installed else None
    if choice is None:
        return None
    main, draft = choice
    # one sentence, two lines at the window's narrowest: it stays until the user's first message
    drafting = f"drafting with {draft.name}" if draft else "with no draft (none installed can draft for it)"
    return FirstPair(str(main.path), str(draft.path) if draft else None,
                     f"Chose {main.name} as the main model, the largest that fits, {drafting}.")


def imported_pair(installed: list[InstalledModel], imported: list[InstalledModel], machine: "MachineMemory",
                  n_ctx: int) -> FirstPair | None:
    """After files are imported in the window: the pair a first start would choose (``first_pair``), so
    that importing a main model with its drafts speculates at once, as the next start would. Where no
    model fits comfortably, the largest imported model that can be a main model all the same (the user
    asked for it), with its best draft, saying it may not fit; None when none can be a main model."""
    choice = first_pair(installed, machine, n_ctx)
    if choice is not None:
        return choice
    mains = [m for m in imported if m.info is not None and not m.info.is_mtp_drafter]
    if not mains:
        return None
    main = max(mains, key=lambda m: (m.size, m.name))
    draft = best_draft(main, installed)
    with_draft = f" with {draft.name} as its draft" if draft else ""
    return FirstPair(str(main.path), str(draft.path) if draft else None,
                     f"Loading {main.name}{with_draft}: it may not fit this machine's memory comfortably.")


def _catalog_drafts(main_file: str) -> set[str]:
    """The draft files the catalog recommends for a main model file of this name."""
    try:
        pairs = load_catalog()
    except QuickdraftError:
        return set()
    return {pair.draft_file.filename for pair in pairs
            if pair.draft_file is not None and Path(pair.main.filename).name == main_file}
