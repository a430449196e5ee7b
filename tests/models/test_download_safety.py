"""Downloads never write outside the models folder, and a disk that fills up mid-download ends in one
clear error with nothing left behind (no partial file, no paused download, nothing registered)."""

from __future__ import annotations

import errno
import io
import json
import pathlib

import pytest

from app.cli import main as quickdraft
from app.models.download import (
    DownloadError, NotEnoughSpaceError, discard_pending, download_model_blocking, local_path, partial_path,
    pending_downloads, pending_path,
)
from app.models.hub import FilePart, HubError, RemoteModel, is_safe_hub_path
from app.models.registry import ModelRegistry
from tests.models.fakehub import MAIN_FILE, TINY_REPO, FakeRepo

EVIL_REPO = "test-org/Evil-GGUF"
TRAVERSAL_NAMES = ["../escaped.gguf", "../../escaped.gguf", "/tmp/absolute.gguf", "sub/../../escaped.gguf",
                   "..\\escaped.gguf", "C:/escaped.gguf", "./dot.gguf", "sub//double.gguf"]


@pytest.mark.parametrize("name", TRAVERSAL_NAMES + ["..", "", "a/..", "owner/../.."])
def test_paths_leading_out_are_not_safe(name):
    assert not is_safe_hub_path(name)


@pytest.mark.parametrize("name", ["model.gguf", "sub/model-Q4_K_M.gguf", "odd..name.gguf", "owner/repo"])
def test_ordinary_hub_paths_are_safe(name):
    assert is_safe_hub_path(name)


@pytest.fixture
def evil_hub(fake_hub):
    data = fake_hub.repos[TINY_REPO].files[MAIN_FILE]
    fake_hub.repos[EVIL_REPO] = FakeRepo({**{name: data for name in TRAVERSAL_NAMES}, "good.gguf": data})
    return fake_hub


def test_traversal_file_names_from_the_hub_are_never_offered(client, evil_hub):
    assert [m.filename for m in client.list_models(EVIL_REPO)] == ["good.gguf"]
    with pytest.raises(HubError, match="has no GGUF file named"):
        client.resolve(EVIL_REPO, "../escaped.gguf")


@pytest.mark.parametrize("name", TRAVERSAL_NAMES)
def test_a_traversal_name_is_refused_before_anything_is_written(client, evil_hub, tmp_path, name):
    models_dir = tmp_path / "deep" / "models"
    models_dir.mkdir(parents=True)
    before = set(tmp_path.rglob("*"))
    model = RemoteModel(EVIL_REPO, "main", (FilePart(name, 100, None),), "?")
    with pytest.raises(DownloadError, match="outside the models folder"):
        download_model_blocking(client, model, models_dir)
    assert set(tmp_path.rglob("*")) == before
    assert not ModelRegistry(models_dir).registry_file.exists()


def test_a_tampered_pending_marker_is_neither_listed_nor_cleaned_up(models_dir, tmp_path):
    victim = tmp_path / "victim.gguf.incomplete"
    victim.write_bytes(b"keep me")
    marker = models_dir / "a" / "b" / "x.gguf.download.json"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"repo_id": "a/b", "parts": [{"filename": "../../../victim.gguf", "size": 7}]}))
    assert pending_downloads(models_dir) == []
    discard_pending(models_dir, RemoteModel("a/b", "main", (FilePart("x.gguf", 7, None),), "?"))
    assert victim.read_bytes() == b"keep me"


@pytest.mark.parametrize("repo", ["../../etc", "/etc/passwd", "a/b/c", "owner/.."])
def test_a_repo_id_that_is_not_one_is_a_clear_error(client, repo):
    with pytest.raises(HubError, match="is not a Hugging Face repository id"):
        client.list_models(repo)


def test_models_files_with_a_traversal_repo_id_is_one_error_line(fake_hub, tmp_path, capsys):
    code = quickdraft(["--data-dir", str(tmp_path / "data"), "models", "files", "../../etc", "--endpoint",
                       fake_hub.url])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


# --- a full disk -----------------------------------------------------------------------------------------

class _FillingDisk(io.RawIOBase):
    """A file on a disk with ``room`` bytes left: writes past it fail with ENOSPC, as the kernel's do."""

    def __init__(self, real, room: int):
        self.real, self.room = real, room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.real.write(data)

    def close(self) -> None:
        self.real.close()
        super().close()


def _fill_disk_after(monkeypatch, room: int, suffix: str = ".incomplete"):
    """Open files ending in ``suffix`` through a real BufferedWriter over a disk that fills up: its
    flush fails, and so does its close, which still holds the unwritten bytes."""
    real_open = pathlib.Path.open

    def open_(self, mode="r", *args, **kwargs):
        if not self.name.endswith(suffix) or "b" not in mode or "r" in mode:
            return real_open(self, mode, *args, **kwargs)
        return io.BufferedWriter(_FillingDisk(real_open(self, mode, buffering=0), room), buffer_size=1 << 20)

    monkeypatch.setattr(pathlib.Path, "open", open_)


def test_disk_full_mid_download_cleans_up_and_lists_no_paused_download(client, fake_hub, models_dir, monkeypatch):
    fake_hub.chunk_size = 4096
    _fill_disk_after(monkeypatch, room=20_000)
    model = client.resolve(TINY_REPO, MAIN_FILE)
    with pytest.raises(NotEnoughSpaceError, match="disk filled up .* partial file was deleted"):
        download_model_blocking(client, model, models_dir)
    dest = local_path(models_dir, TINY_REPO, MAIN_FILE)
    assert not partial_path(dest).exists() and not dest.exists() and not pending_path(dest).exists()
    assert pending_downloads(models_dir) == []
    assert ModelRegistry(models_dir).list() == []


def test_disk_full_writing_the_resume_marker_is_a_clear_error(client, fake_hub, models_dir, monkeypatch):
    real_write_text = pathlib.Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name.endswith(".download.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    with pytest.raises(NotEnoughSpaceError, match="disk filled up"):
        download_model_blocking(client, client.resolve(TINY_REPO, MAIN_FILE), models_dir)
    assert pending_downloads(models_dir) == []


def test_an_unwritable_models_folder_is_a_clear_error(client, fake_hub, models_dir, monkeypatch):
    def refuse(self, *args, **kwargs):   # root may write anywhere: refuse as a read-only folder would
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(pathlib.Path, "mkdir", refuse)
    with pytest.raises(DownloadError, match="Could not write .* Permission denied"):
        download_model_blocking(client, client.resolve(TINY_REPO, MAIN_FILE), models_dir)


def test_the_cli_download_reports_a_full_disk_in_one_line(fake_hub, tmp_path, monkeypatch, capsys):
    _fill_disk_after(monkeypatch, room=20_000)
    code = quickdraft(["--data-dir", str(tmp_path / "data"), "models", "download", TINY_REPO, MAIN_FILE,
                       "--endpoint", fake_hub.url])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("error: The disk filled up") and not any("Traceback" in line for line in err)
