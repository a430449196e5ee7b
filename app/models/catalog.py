"""Recommended main/draft pairs (resources/catalog.json): real GGUF builds on Hugging Face."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import QuickdraftError
from app.paths import resources_dir

from .download import local_path
from .registry import InstalledModel

GB = 1_000_000_000


class CatalogError(QuickdraftError):
    """The catalog file is missing or malformed."""


@dataclass(frozen=True)
class CatalogModel:
    repo_id: str
    filename: str
    family: str
    params: str
    size_gb: float

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
    draft: CatalogModel
    expected_memory_gb: float
    context: int

    @property
    def expected_memory(self) -> int:
        return int(self.expected_memory_gb * GB)

    @property
    def download_size(self) -> int:
        return int((self.main.size_gb + self.draft.size_gb) * GB)


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
    return CatalogPair(
        id=entry["id"], title=entry["title"], family=entry["family"], use=entry.get("use", "chat"),
        main=_model(entry["main"]), draft=_model(entry["draft"]),
        expected_memory_gb=float(entry["expected_memory_gb"]), context=int(entry.get("context", context)),
    )


def _model(entry: dict) -> CatalogModel:
    return CatalogModel(entry["repo_id"], entry["filename"], entry["family"], entry.get("params", "?"),
                        float(entry["size_gb"]))
