"""Recommended main/draft pairs (resources/catalog.json): real GGUF builds on Hugging Face.

A pair drafts in one of two ways (its ``drafter``):

* ``"model"``: a separate, smaller draft model of the same tokenizer family (the classic pair);
* ``"mtp"``: multi-token prediction. Either the main GGUF keeps its MTP (nextn) layers and drafts
  for itself (``"draft": null`` in the file, the main marked ``"mtp_heads": true``: Qwen3.5/3.6), or
  the draft is an MTP drafter (``"kind": "mtp-drafter"``: Gemma 4's "assistant"), a draft-only GGUF
  that runs on the main model's activations and cannot run as an ordinary draft model.

Code written for two files keeps working: ``pair.draft`` is always a model. For a pair whose main
drafts for itself it *is* the main (the model that drafts), so finding or downloading it finds or
downloads the main; ``pair.draft_file`` is None there and ``pair.models`` names each file once.

What this app can run is ``ENGINE_SUPPORTS``: ``pair.missing`` lists what a pair needs beyond it
(MTP drafting; rolling back the recurrent state of a hybrid model such as Qwen3.5/3.6 when drafted
tokens are rejected). Such a pair is still offered, honestly labelled, and its main runs alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import QuickdraftError
from app.models.download import local_path
from app.models.registry import InstalledModel
from app.paths import resources_dir

GB = 1_000_000_000

DRAFTERS = ("model", "mtp")                # a separate draft model; multi-token prediction
MODEL_KINDS = ("model", "mtp-drafter")     # a language model; a draft-only MTP drafter
SUITS = ("cpu", "gpu", "moe")              # runs well on a CPU, on a GPU; the main is a mixture of experts
NEEDS = ("mtp", "mtp-drafter", "rollback")  # a main's own MTP heads; a separate MTP drafter file; recurrent rollback

# What the app's engine can do beyond drafting with a separate model: it rolls back hybrid and recurrent
# models exactly (app/core/llama/binding.py: llama.cpp's snapshots, else a saved state), drafts with a main
# model's own MTP heads (--drafter mtp) and with a separate MTP drafter file (Gemma 4's assistant, the
# pair's draft: app/core/llama/mtp.py's AssistantHead).
ENGINE_SUPPORTS: frozenset[str] = frozenset({"rollback", "mtp", "mtp-drafter"})

NEED_PHRASES = {"mtp": "needs MTP drafting", "mtp-drafter": "needs MTP drafting with a drafter file",
                "rollback": "needs recurrent-state rollback"}
MOE_NOTE = "MoE main: speculation often does not pay"


class CatalogError(QuickdraftError):
    """The catalog file is missing or malformed."""


@dataclass(frozen=True)
class CatalogModel:
    repo_id: str
    filename: str
    family: str           # tokenizer family: a draft must share its main's
    params: str
    size_gb: float
    kind: str = "model"   # "mtp-drafter": drafts only on its main's activations, never runs alone
    mtp_heads: bool = False   # the GGUF keeps its MTP (nextn) layers, so it can draft for itself
    recurrent: bool = False   # hybrid with a recurrent state (Qwen3.5/3.6's Gated DeltaNet layers)

    def find_installed(self, models_dir: Path, installed: list[InstalledModel]) -> Path | None:
        """Where this model is installed: its download location, or any installed file of that name."""
        downloaded = local_path(models_dir, self.repo_id, self.filename)
        if downloaded.exists():
            return downloaded
        return next((m.path for m in installed if m.name == Path(self.filename).name and m.usable), None)


@dataclass(frozen=True)
class CatalogPair:
    id: str
    title: str
    family: str
    use: str
    main: CatalogModel
    draft: CatalogModel   # the main itself where the main drafts with its own MTP heads
    expected_memory_gb: float
    context: int
    drafter: str = "model"
    suits: tuple[str, ...] = ()

    @property
    def self_drafting(self) -> bool:
        """The main drafts with its own MTP heads: there is no separate draft file."""
        return self.drafter == "mtp" and self.draft == self.main

    @property
    def draft_file(self) -> CatalogModel | None:
        """The separate draft (model or MTP drafter) to download, None where the main drafts for itself."""
        return None if self.self_drafting else self.draft

    @property
    def models(self) -> tuple[CatalogModel, ...]:
        """The files of the pair, each once."""
        return (self.main,) if self.self_drafting else (self.main, self.draft)

    @property
    def needs(self) -> tuple[str, ...]:
        """What speculating with this pair asks of the engine beyond drafting with a separate model."""
        needs = []
        if self.drafter == "mtp":
            needs.append("mtp" if self.self_drafting else "mtp-drafter")
        if any(m.recurrent for m in self.models):
            needs.append("rollback")
        return tuple(needs)

    @property
    def missing(self) -> tuple[str, ...]:
        """What this pair needs that the app cannot do yet."""
        return tuple(n for n in self.needs if n not in ENGINE_SUPPORTS)

    @property
    def can_speculate(self) -> bool:
        """The app can run this pair as a pair now; otherwise its main runs alone."""
        return not self.missing

    @property
    def drafting(self) -> str:
        """How the pair drafts, one short phrase: "drafts with its MTP heads (needs MTP drafting)"."""
        if self.self_drafting:
            how = "drafts with its MTP heads"
        elif self.draft.kind == "mtp-drafter":
            how = f"drafts with its {self.draft.params} MTP drafter"
        else:
            how = f"{self.draft.params} draft model"
        missing = self.missing
        if missing:   # MTP drafting first: a pair that needs it needs the rollback as part of it
            how += f" ({NEED_PHRASES[missing[0]]})"
        return how

    @property
    def suits_text(self) -> str:
        return describe_suits(self.suits)

    @property
    def expected_memory(self) -> int:
        return int(self.expected_memory_gb * GB)

    @property
    def download_size(self) -> int:
        return int(sum(m.size_gb for m in self.models) * GB)


def describe_suits(suits: tuple[str, ...] | list[str]) -> str:
    """One short phrase: "suits a CPU or a GPU", "suits a GPU; MoE main: speculation often does not pay"."""
    hardware = " or ".join(f"a {s.upper()}" for s in ("cpu", "gpu") if s in suits)
    parts = [f"suits {hardware}"] if hardware else []
    if "moe" in suits:
        parts.append(MOE_NOTE)
    return "; ".join(parts)


def default_catalog_path() -> Path:
    """resources/catalog.json, in the source tree or next to a frozen (PyInstaller) app."""
    return resources_dir() / "catalog.json"


def load_catalog(path: Path | None = None) -> list[CatalogPair]:
    path = path or default_catalog_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        context = int(data.get("context", 8192))
        return [_pair(entry, context) for entry in data["pairs"]]
    except FileNotFoundError as exc:
        raise CatalogError(f"The catalog of recommended pairs is missing ({path}).") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise CatalogError(f"The catalog of recommended pairs ({path}) is malformed: {exc!r}") from exc


def find_pair(pairs: list[CatalogPair], pair_id: str) -> CatalogPair:
    for pair in pairs:
        if pair.id == pair_id:
            return pair
    raise CatalogError(f"No recommended pair is called {pair_id!r}; known: {', '.join(p.id for p in pairs)}")


def _pair(entry: dict, context: int) -> CatalogPair:
    pair_id = entry["id"]
    drafter = entry.get("drafter", "model")
    main = _model(entry["main"])
    draft = _model(entry["draft"]) if entry["draft"] is not None else None
    suits = tuple(entry.get("suits", ()))
    _check(pair_id, entry["family"], drafter, main, draft, suits)
    return CatalogPair(
        id=pair_id, title=entry["title"], family=entry["family"], use=entry.get("use", "chat"),
        main=main, draft=draft or main,
        expected_memory_gb=float(entry["expected_memory_gb"]), context=int(entry.get("context", context)),
        drafter=drafter, suits=suits,
    )


def _check(pair_id: str, family: str, drafter: str, main: CatalogModel, draft: CatalogModel | None,
           suits: tuple[str, ...]) -> None:
    """A pair that could not draft as described is malformed (ValueError, reported as CatalogError)."""
    def bad(why: str) -> ValueError:
        return ValueError(f"pair {pair_id!r}: {why}")

    if drafter not in DRAFTERS:
        raise bad(f"drafter {drafter!r} is not one of {DRAFTERS}")
    if main.kind != "model":
        raise bad("the main model must be a language model, not an MTP drafter")
    if unknown := [s for s in suits if s not in SUITS]:
        raise bad(f"suits {unknown} are not among {SUITS}")
    if draft is None:
        if drafter != "mtp" or not main.mtp_heads:
            raise bad('"draft": null needs "drafter": "mtp" and a main with "mtp_heads": true')
    elif (draft.kind == "mtp-drafter") != (drafter == "mtp"):
        raise bad('an MTP drafter and "drafter": "mtp" go together')
    for model in (main, draft or main):
        if model.family != family:
            raise bad(f"{model.filename} is of the {model.family!r} family, the pair of {family!r}: "
                      "a draft must share its main model's vocabulary")


def _model(entry: dict) -> CatalogModel:
    kind = entry.get("kind", "model")
    if kind not in MODEL_KINDS:
        raise ValueError(f"{entry['filename']}: kind {kind!r} is not one of {MODEL_KINDS}")
    return CatalogModel(entry["repo_id"], entry["filename"], entry["family"], entry.get("params", "?"),
                        float(entry["size_gb"]), kind=kind, mtp_heads=bool(entry.get("mtp_heads", False)),
                        recurrent=bool(entry.get("recurrent", False)))
