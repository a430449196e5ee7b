"""The installed models: GGUF files under the models folder plus references to files elsewhere.

Files under ``models_dir`` are found by scanning it (downloads, copies, links); ``registry.json`` in
that folder remembers where each came from and holds references to files kept elsewhere (the Hugging
Face cache). A split model (``x-00001-of-00003.gguf``) is one entry, named by its first part.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from app.core.errors import ModelFileError, QuickdraftError
from app.core.gguf.info import GGUFInfo, read_gguf_info
from app.models.diskspace import check_disk_space, file_size
from app.models.hub import SPLIT_RE

REGISTRY_FILE = "registry.json"
IMPORT_DIR = "imported"
_LOCK = threading.Lock()


class RegistryError(QuickdraftError):
    """An import, link or delete a user asked for cannot be done."""


@dataclass(frozen=True)
class InstalledModel:
    path: Path                    # the file to load (first part of a split model)
    parts: tuple[Path, ...]
    size: int                     # all parts together
    source: str                   # download | copy | link | hf-cache | found
    repo_id: str | None
    info: GGUFInfo | None
    error: str | None             # why its metadata could not be read

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def external(self) -> bool:
        """Kept outside the models folder (deleting it from the list leaves the file alone)."""
        return self.source == "hf-cache"

    @property
    def usable(self) -> bool:
        return self.info is not None


@dataclass(frozen=True)
class CachedGGUF:
    repo_id: str
    path: Path
    size: int


class ModelRegistry:
    def __init__(self, models_dir: Path):
        self.models_dir = Path(models_dir)

    # --- reading ---------------------------------------------------------------------------------

    def list(self) -> list[InstalledModel]:
        """Every installed model, sorted by name; unreadable ones carry an ``error``."""
        entries = self._load()
        found: dict[Path, InstalledModel] = {}
        for path in self._scan():
            meta = entries.get(self._key(path), {})
            found[path] = _describe(path, meta.get("source", "found"), meta.get("repo_id"))
        for key, meta in entries.items():
            path = Path(key)
            if path.is_absolute() and path not in found:
                found[path] = _describe(path, meta.get("source", "hf-cache"), meta.get("repo_id"))
        return sorted(found.values(), key=lambda m: m.name.lower())

    def get(self, path: str | os.PathLike[str]) -> InstalledModel:
        wanted = Path(path)
        for model in self.list():
            if model.path == wanted or _same(model.path, wanted):
                return model
        raise RegistryError(f"{path} is not an installed model. See the list with: quickdraft models list")

    def find(self, name_or_path: str) -> InstalledModel:
        """A model by path, file name or a unique part of its file name."""
        models = self.list()
        exact = [m for m in models if str(m.path) == name_or_path or m.name == name_or_path
                 or _same(m.path, Path(name_or_path))]
        if exact:
            return exact[0]
        partial = [m for m in models if name_or_path.lower() in m.name.lower()]
        if len(partial) == 1:
            return partial[0]
        if not partial:
            raise RegistryError(f"No installed model matches {name_or_path!r}. "
                                f"See the list with: quickdraft models list")
        names = ", ".join(m.name for m in partial[:5])
        raise RegistryError(f"{name_or_path!r} matches several models ({names}); give the full file name.")

    def total_disk_used(self) -> int:
        """Bytes the models folder holds (links and Hugging Face cache references count nothing)."""
        return sum(m.size for m in self.list() if m.source not in ("link", "hf-cache") and m.path.exists())

    def _scan(self) -> list[Path]:
        if not self.models_dir.is_dir():
            return []
        out = []
        for path in self.models_dir.rglob("*"):
            name = path.name.lower()
            if not name.endswith(".gguf") or name.startswith("mmproj") or not (path.is_file() or path.is_symlink()):
                continue
            split = SPLIT_RE.match(path.name)
            if split and int(split.group("index")) != 1:
                continue
            out.append(path)
        return out

    # --- changing ----------------------------------------------------------------------------------

    def import_file(self, source: str | os.PathLike[str], mode: str = "copy") -> InstalledModel:
        """Copy (``mode="copy"``) or link (``"link"``) a GGUF file, with all its parts, into the folder."""
        if mode not in ("copy", "link"):
            raise RegistryError(f"Unknown import mode {mode!r}: use copy or link.")
        src = _first_part(Path(source).expanduser())
        read_gguf_info(src)  # a clear ModelFileError for a missing, foreign or damaged file
        parts = local_parts(src)
        if _inside(src, self.models_dir):
            raise RegistryError(f"{src.name} is already in the models folder.")
        dest_dir = self.models_dir / IMPORT_DIR
        clashes = [dest_dir / p.name for p in parts if (dest_dir / p.name).exists()]
        if clashes:
            raise RegistryError(f"A model named {clashes[0].name} is already installed; delete it first "
                                f"or rename the file you are importing.")
        dest_dir.mkdir(parents=True, exist_ok=True)
        if mode == "copy":
            check_disk_space(dest_dir, sum(p.stat().st_size for p in parts))
            for part in parts:
                _copy_atomically(part, dest_dir / part.name)
        else:
            for part in parts:
                _link(part, dest_dir / part.name)
        dest = dest_dir / src.name
        self._set(dest, {"source": mode, "origin": str(src.resolve())})
        return _describe(dest, mode, None)

    def add_external(self, path: str | os.PathLike[str], source: str = "hf-cache",
                     repo_id: str | None = None) -> InstalledModel:
        """List a GGUF kept elsewhere (the Hugging Face cache) without copying it."""
        path = _first_part(Path(path).expanduser()).absolute()
        read_gguf_info(path)
        self._set(path, {"source": source, "repo_id": repo_id})
        return _describe(path, source, repo_id)

    def record_download(self, path: Path, repo_id: str, filename: str, revision: str,
                        sha256: list[str]) -> None:
        self._set(path, {"source": "download", "repo_id": repo_id, "filename": filename, "revision": revision,
                         "sha256": sha256})

    def remove(self, path: str | os.PathLike[str]) -> str:
        """Delete a model's files (a link: the link only; a cache reference: the reference only).

        Returns a sentence saying what was done."""
        model = self.get(path)
        if model.external:
            self._drop(model.path)
            return f"Removed {model.name} from the list; the file stays in the Hugging Face cache."
        for part in model.parts:
            part.unlink(missing_ok=True)
        self._drop(model.path)
        self._prune_empty_dirs(model.path.parent)
        if model.source == "link":
            return f"Removed the link to {model.name}; the original file was not touched."
        return f"Deleted {model.name} ({len(model.parts)} file{'s' if len(model.parts) > 1 else ''})."

    def _prune_empty_dirs(self, directory: Path) -> None:
        root = self.models_dir.resolve()
        while directory.resolve() != root and _inside(directory, root) and directory.is_dir():
            if any(directory.iterdir()):
                return
            directory.rmdir()
            directory = directory.parent

    # --- registry.json -------------------------------------------------------------------------------

    @property
    def registry_file(self) -> Path:
        return self.models_dir / REGISTRY_FILE

    def _key(self, path: Path) -> str:
        try:
            return path.absolute().relative_to(self.models_dir.absolute()).as_posix()
        except ValueError:
            return str(path.absolute())

    def _load(self) -> dict[str, dict]:
        try:
            data = json.loads(self.registry_file.read_text(encoding="utf-8"))
            models = data.get("models", {})
            return {k: v for k, v in models.items() if isinstance(v, dict)}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, AttributeError):
            self._keep_corrupt_aside()
            return {}

    def _keep_corrupt_aside(self) -> None:
        aside = self.registry_file.with_suffix(".corrupt.json")
        try:
            self.registry_file.replace(aside)
        except OSError:
            pass

    def _set(self, path: Path, meta: dict) -> None:
        with _LOCK:
            entries = self._load()
            entries[self._key(path)] = {**meta, "added": datetime.now(timezone.utc).isoformat(timespec="seconds")}
            self._save(entries)

    def _drop(self, path: Path) -> None:
        with _LOCK:
            entries = self._load()
            entries.pop(self._key(path), None)
            self._save(entries)

    def _save(self, entries: dict[str, dict]) -> None:
        self.models_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.registry_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": 1, "models": entries}, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.registry_file)


def find_hf_cache_models(cache_dir: str | os.PathLike[str] | None = None) -> list[CachedGGUF]:
    """GGUF models in the Hugging Face cache (huggingface_hub.scan_cache_dir); none if there is no cache."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir)
    except (CacheNotFound, OSError):
        return []
    found: dict[Path, CachedGGUF] = {}
    for repo in info.repos:
        if repo.repo_type != "model":
            continue
        for revision in repo.revisions:
            for file in revision.files:
                name = file.file_name.lower()
                split = SPLIT_RE.match(file.file_name)
                if not name.endswith(".gguf") or name.startswith("mmproj") or (split and int(split.group("index")) != 1):
                    continue
                found.setdefault(Path(file.file_path), CachedGGUF(repo.repo_id, Path(file.file_path),
                                                                   file.size_on_disk))
    return sorted(found.values(), key=lambda c: (c.repo_id, c.path.name))


def local_parts(first: Path) -> tuple[Path, ...]:
    """All parts of a (possibly split) local GGUF, given its first part."""
    split = SPLIT_RE.match(first.name)
    if not split:
        return (first,)
    count = int(split.group("count"))
    parts = tuple(first.with_name(f"{split.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1))
    missing = [p.name for p in parts if not p.exists()]
    if missing:
        raise ModelFileError(f"{first.name} is split in {count} parts but {', '.join(missing[:3])} "
                             f"{'is' if len(missing) == 1 else 'are'} missing.")
    return parts


def _first_part(path: Path) -> Path:
    split = SPLIT_RE.match(path.name)
    if split and int(split.group("index")) != 1:
        return path.with_name(f"{split.group('stem')}-00001-of-{split.group('count')}.gguf")
    return path


def _describe(path: Path, source: str, repo_id: str | None) -> InstalledModel:
    """One model for the list; a damaged or unreadable file is listed with its ``error``, never raised:
    read_gguf_info raises only QuickdraftError, and the file system only OSError."""
    try:
        parts = local_parts(path)
        info = read_gguf_info(path)
        size = sum(p.stat().st_size for p in parts)
        return InstalledModel(path, parts, size, source, repo_id, info, None)
    except QuickdraftError as exc:
        return InstalledModel(path, (path,), file_size(path), source, repo_id, None, str(exc))
    except OSError as exc:
        return InstalledModel(path, (path,), file_size(path), source, repo_id, None,
                              f"{path.name} cannot be read: {exc.strerror or exc}")


def _copy_atomically(src: Path, dest: Path) -> None:
    tmp = dest.with_name(dest.name + ".incomplete")
    try:
        shutil.copyfile(src, tmp)
        tmp.replace(dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RegistryError(f"Could not copy {src.name}: {exc.strerror or exc}") from exc


def _link(src: Path, dest: Path) -> None:
    try:
        os.symlink(src.resolve(), dest)
    except OSError:
        try:
            os.link(src, dest)  # Windows without symlink rights, same drive
        except OSError as exc:
            raise RegistryError(f"Could not link {src.name} into the models folder ({exc.strerror or exc}); "
                                f"import it as a copy instead.") from exc


def _inside(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
        return True
    except ValueError:
        return False


def _same(a: Path, b: Path) -> bool:
    try:
        return a.absolute() == b.absolute() or (a.exists() and b.exists() and os.path.samefile(a, b)
                                                and a.is_symlink() == b.is_symlink())
    except OSError:
        return False
