"""Where a download's files go, and the bookkeeping of unfinished ones.

A model (one file, or every part of a split file) downloads into ``models_dir/<owner>/<repo>/``.
Bytes go to ``<file>.incomplete`` next to the target; ``<file>.download.json`` remembers what a
partial download was, so it can be listed and resumed after a restart, or discarded.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core.errors import QuickdraftError
from app.models.diskspace import file_size
from app.models.hub import FilePart, RemoteModel, is_safe_hub_path

PARTIAL_SUFFIX = ".incomplete"
PENDING_SUFFIX = ".download.json"


class DownloadError(QuickdraftError):
    """A download failed; the message says why and what to do."""


def local_path(models_dir: Path, repo_id: str, filename: str) -> Path:
    """Where a hub file lives locally: ``models_dir/<owner>/<repo>/<filename>``. A repository id or
    file name that would lead outside the models folder (``../``, an absolute path) is refused."""
    for name in (repo_id, filename):
        if not is_safe_hub_path(name):
            raise DownloadError(f"Refusing the hub path {name!r}: it would be written outside the models folder.")
    return Path(models_dir) / repo_id / filename


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + PARTIAL_SUFFIX)


def pending_path(path: Path) -> Path:
    return path.with_name(path.name + PENDING_SUFFIX)


def write_pending(model: RemoteModel, first: Path) -> None:
    first.parent.mkdir(parents=True, exist_ok=True)
    data = {"repo_id": model.repo_id, "revision": model.revision, "quantization": model.quantization,
            "parts": [asdict(p) for p in model.parts]}
    pending_path(first).write_text(json.dumps(data, indent=1), encoding="utf-8")


def discard_stale_partials(model: RemoteModel, dests: list[Path]) -> None:
    """A partial file of an older version of the model (the hub's SHA-256 changed) starts over."""
    old = read_pending(pending_path(dests[0]))
    if old is None:
        return
    old_sha = {p.filename: p.sha256 for p in old.parts}
    for part, dest in zip(model.parts, dests):
        if old_sha.get(part.filename) != part.sha256:
            partial_path(dest).unlink(missing_ok=True)


def read_pending(path: Path) -> RemoteModel | None:
    """The download a marker file describes; None for a damaged one, or one naming paths outside the
    models folder (it is never resumed, listed or cleaned up)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        parts = tuple(FilePart(p["filename"], int(p["size"]), p.get("sha256")) for p in data["parts"])
        model = RemoteModel(data["repo_id"], data.get("revision", "main"), parts, data.get("quantization", "?"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    names = [model.repo_id, *(p.filename for p in parts)]
    return model if parts and all(is_safe_hub_path(n) for n in names) else None


@dataclass(frozen=True)
class PendingDownload:
    model: RemoteModel
    done: int

    @property
    def key(self) -> str:
        return download_key(self.model)


def pending_downloads(models_dir: Path) -> list[PendingDownload]:
    """Interrupted downloads under ``models_dir`` that can be resumed."""
    found = []
    for marker in sorted(Path(models_dir).rglob(f"*{PENDING_SUFFIX}")):
        model = read_pending(marker)
        if model is None:
            continue
        dests = [local_path(models_dir, model.repo_id, p.filename) for p in model.parts]
        done = sum(p.size if d.exists() else file_size(partial_path(d)) for d, p in zip(dests, model.parts))
        found.append(PendingDownload(model, done))
    return found


def discard_pending(models_dir: Path, model: RemoteModel) -> None:
    """Forget a partial download and delete its bytes."""
    for part in model.parts:
        partial_path(local_path(models_dir, model.repo_id, part.filename)).unlink(missing_ok=True)
    pending_path(local_path(models_dir, model.repo_id, model.filename)).unlink(missing_ok=True)


def download_key(model: RemoteModel) -> str:
    return f"{model.repo_id}/{model.filename}"
