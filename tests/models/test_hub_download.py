"""Search, file listing and resumable verified downloads against a local fake Hugging Face Hub."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import threading
import time
from collections import namedtuple

import pytest

from app.core.gguf.info import read_gguf_info
from app.models import diskspace
from app.models.download import (
    CancelToken, DownloadCancelled, DownloadError, DownloadManager, NotEnoughSpaceError, download_model,
    download_model_blocking, local_path, partial_path, pending_downloads,
)
from app.models.hub import HubClient, HubError, quantization_from_name
from app.models.registry import ModelRegistry
from tests.models.fakehub import DRAFT_FILE, GATED_REPO, MAIN_FILE, OTHER_REPO, SPLIT_REPO, TINY_REPO


def _wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def _model(client: HubClient, repo: str, filename: str):
    return client.resolve(repo, filename)


def test_search_lists_gguf_repos_most_downloaded_first(client, fake_hub):
    results = client.search("tiny")
    assert [r.repo_id for r in results] == [OTHER_REPO, TINY_REPO, SPLIT_REPO, GATED_REPO]
    assert results[1].downloads == 500 and results[1].likes == 7
    assert results[3].gated
    assert [r.repo_id for r in client.search("split")] == [SPLIT_REPO]
    search = [r for r in fake_hub.requests if r.path == "/api/models"]
    assert search, "the search went through the hub's /api/models"


def test_empty_search_is_a_user_error(client):
    with pytest.raises(HubError, match="Type something"):
        client.search("   ")


def test_file_listing_has_sizes_quantization_and_groups_split_files(client, fake_hub):
    models = client.list_models(TINY_REPO)
    by_name = {m.filename: m for m in models}
    assert set(by_name) == {MAIN_FILE, DRAFT_FILE}, "mmproj projectors and the README are not models"
    assert by_name[DRAFT_FILE].quantization == "Q8_0"
    assert by_name[MAIN_FILE].quantization == "F32"
    assert by_name[MAIN_FILE].size == len(fake_hub.repos[TINY_REPO].files[MAIN_FILE])
    assert by_name[MAIN_FILE].parts[0].sha256 == hashlib.sha256(fake_hub.repos[TINY_REPO].files[MAIN_FILE]).hexdigest()

    (split,) = client.list_models(SPLIT_REPO)
    assert split.is_split and len(split.parts) == 2
    assert split.quantization == "Q4_K_M"
    assert split.size == sum(len(b) for b in fake_hub.repos[SPLIT_REPO].files.values())
    assert "+1 parts" in split.label


def test_model_card_summary_skips_front_matter_headings_and_tables(client):
    summary = client.card_summary(TINY_REPO)
    assert summary.startswith("A tiny llama-architecture model")
    assert "license" not in summary and "|" not in summary and "# Tiny" not in summary
    assert client.card_summary(OTHER_REPO) is None


@pytest.mark.parametrize("name, quant", [
    ("Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
    ("qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf", "Q4_K_M"),
    ("google_gemma-3-1b-it-IQ4_XS.gguf", "IQ4_XS"),
    ("Llama-3.2-1B-Instruct-f16.gguf", "F16"),
    ("model.gguf", "?"),
])
def test_quantization_from_file_name(name, quant):
    assert quantization_from_name(name) == quant


def test_unknown_repo_and_gated_repo_give_clear_errors(fake_hub):
    client = HubClient(endpoint=fake_hub.url, token="wrong")
    with pytest.raises(HubError, match="no such repository"):
        client.list_models("test-org/nope")
    with pytest.raises(HubError, match="gated.*token"):
        client.list_models(GATED_REPO)
    fake_hub.token = "right"
    assert HubClient(endpoint=fake_hub.url, token="right").list_models(GATED_REPO)


def test_unreachable_hub_is_a_clear_error(monkeypatch):
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http.time, "sleep", lambda s: None)   # the hub's own retries, without the waits
    client = HubClient(endpoint="http://127.0.0.1:9", token="x")
    with pytest.raises(HubError, match="cannot be reached"):
        client.search("qwen")


def test_a_hub_whose_name_cannot_be_looked_up_is_said_in_words(monkeypatch):
    """Issue 41, fault 6: a failed name lookup showed as "ConnectError: [Errno -2] Name or service not known"."""
    import socket

    import httpx2
    from huggingface_hub.utils import _http

    from app.models.hub import network_reason

    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(_http.time, "sleep", lambda s: None)   # the hub's own retries, without the waits
    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    with pytest.raises(HubError) as raised:
        HubClient(endpoint="http://hub.example", token="x").search("qwen")
    assert "its address could not be looked up (no network connection" in str(raised.value)
    assert "Errno" not in str(raised.value) and "ConnectError" not in str(raised.value)
    assert network_reason(httpx2.ReadTimeout("timed out")) == "it did not answer in time"
    refused = httpx2.ConnectError("[Errno 111] Connection refused")
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert network_reason(refused) == "the connection was refused"


def test_download_reports_progress_verifies_and_registers(client, fake_hub, models_dir):
    fake_hub.chunk_size = 32 * 1024
    model = _model(client, TINY_REPO, MAIN_FILE)
    seen = []
    path = download_model_blocking(client, model, models_dir, seen.append)
    assert path == local_path(models_dir, TINY_REPO, MAIN_FILE)
    assert path.read_bytes() == fake_hub.repos[TINY_REPO].files[MAIN_FILE]
    assert not partial_path(path).exists()
    downloading = [p for p in seen if p.stage == "downloading"]
    assert downloading and all(0 < p.done <= p.total == model.size for p in downloading)
    assert [p.done for p in downloading] == sorted(p.done for p in downloading)
    assert any(p.stage == "verifying" for p in seen)
    assert seen[-1].stage == "done" and seen[-1].done == model.size
    installed = ModelRegistry(models_dir).get(path)
    assert installed.source == "download" and installed.repo_id == TINY_REPO
    assert installed.info.architecture == "llama"
    assert pending_downloads(models_dir) == []


def test_resume_after_the_server_drops_the_connection(client, fake_hub, models_dir):
    data = fake_hub.repos[TINY_REPO].files[MAIN_FILE]
    cut = 300_000
    fake_hub.cut_after[MAIN_FILE] = cut
    path = download_model_blocking(client, _model(client, TINY_REPO, MAIN_FILE), models_dir)
    first, second = fake_hub.file_requests(MAIN_FILE)
    assert "range" not in {k.lower() for k in first.headers}
    assert second.headers.get("Range") == f"bytes={cut}-"
    assert path.read_bytes() == data
    assert read_gguf_info(path).vocab_size > 256


def test_cancel_keeps_the_partial_file_and_the_next_download_resumes(client, fake_hub, models_dir):
    data = fake_hub.repos[TINY_REPO].files[MAIN_FILE]
    fake_hub.stall_after[MAIN_FILE] = 200_000
    model = _model(client, TINY_REPO, MAIN_FILE)
    cancel = CancelToken()
    partial = partial_path(local_path(models_dir, TINY_REPO, MAIN_FILE))
    outcome = {}

    def run():
        try:
            download_model_blocking(client, model, models_dir, None, cancel)
        except DownloadCancelled as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    assert _wait_for(lambda: partial.exists() and partial.stat().st_size >= 200_000), "200 kB arrived"
    cancel.cancel()                      # the server is stalled: cancel must not wait for it
    worker.join(5)
    assert not worker.is_alive()
    assert "paused" in str(outcome["error"])
    assert partial.stat().st_size == 200_000
    assert not local_path(models_dir, TINY_REPO, MAIN_FILE).exists()
    assert ModelRegistry(models_dir).list() == [], "a partial download is not an installed model"
    (pending,) = pending_downloads(models_dir)
    assert pending.model.filename == MAIN_FILE and pending.done == 200_000

    fake_hub.release.set()
    path = download_model_blocking(client, pending.model, models_dir)
    assert fake_hub.file_requests(MAIN_FILE)[-1].headers.get("Range") == "bytes=200000-"
    assert path.read_bytes() == data


def test_sha256_mismatch_deletes_the_file(client, fake_hub, models_dir):
    fake_hub.wrong_sha.add(MAIN_FILE)
    model = _model(client, TINY_REPO, MAIN_FILE)
    with pytest.raises(DownloadError, match="corrupt.*SHA-256.*deleted"):
        download_model_blocking(client, model, models_dir)
    dest = local_path(models_dir, TINY_REPO, MAIN_FILE)
    assert not dest.exists() and not partial_path(dest).exists()
    assert ModelRegistry(models_dir).list() == []


def test_not_enough_disk_space_is_refused_before_writing(client, fake_hub, models_dir, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 1000, 1000))
    model = _model(client, TINY_REPO, MAIN_FILE)
    with pytest.raises(NotEnoughSpaceError, match="Not enough disk space"):
        download_model_blocking(client, model, models_dir)
    assert list(models_dir.rglob("*")) == []
    assert fake_hub.file_requests(MAIN_FILE) == []


def test_disk_filling_up_mid_download_leaves_nothing_listed(client, fake_hub, models_dir, monkeypatch):
    import errno

    from app.models.download import transfer

    calls = {"n": 0}

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def write(self, chunk):
            calls["n"] += 1
            if calls["n"] > 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(chunk)

        def flush(self):
            self.f.flush()

        def close(self):
            self.f.close()

    original = transfer._write
    monkeypatch.setattr(transfer, "_write", lambda out, chunk, partial: original(FullDisk(out), chunk, partial))
    with pytest.raises(NotEnoughSpaceError, match="disk filled up"):
        download_model_blocking(client, _model(client, TINY_REPO, MAIN_FILE), models_dir)
    dest = local_path(models_dir, TINY_REPO, MAIN_FILE)
    assert not partial_path(dest).exists() and not dest.exists()
    assert ModelRegistry(models_dir).list() == []


def test_split_model_downloads_every_part_and_lists_once(client, fake_hub, models_dir):
    (model,) = client.list_models(SPLIT_REPO)
    path = download_model_blocking(client, model, models_dir)
    for part in model.parts:
        assert local_path(models_dir, SPLIT_REPO, part.filename).read_bytes() == \
            fake_hub.repos[SPLIT_REPO].files[part.filename]
    (installed,) = ModelRegistry(models_dir).list()
    assert installed.path == path and len(installed.parts) == 2
    assert installed.size == model.size


def test_unknown_file_name_is_a_clear_error(client):
    with pytest.raises(HubError, match="no GGUF file named"):
        client.resolve(TINY_REPO, "missing.gguf")


def test_free_space_check_counts_what_is_already_downloaded(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 100 * 10**6))
    diskspace.check_disk_space(tmp_path / "not" / "yet", 10 * 10**6)   # fits: 10 MB + margin < 100 MB
    with pytest.raises(NotEnoughSpaceError):
        diskspace.check_disk_space(tmp_path, 90 * 10**6)


# --- asyncio: several downloads at once, cancel, resume -------------------------------------------

def test_async_downloads_run_concurrently_and_report_on_the_loop(client, fake_hub, models_dir):
    fake_hub.chunk_delay_s = 0.01

    async def main():
        loop_thread = threading.get_ident()
        threads = set()

        def progress(p):
            threads.add(threading.get_ident())

        models = [_model(client, TINY_REPO, MAIN_FILE), _model(client, TINY_REPO, DRAFT_FILE)]
        paths = await asyncio.gather(*(download_model(client, m, models_dir, progress) for m in models))
        return loop_thread, threads, paths

    loop_thread, threads, paths = asyncio.run(main())
    assert threads == {loop_thread}, "progress callbacks run on the event loop's thread"
    assert [p.name for p in paths] == [MAIN_FILE, DRAFT_FILE]
    assert all(p.exists() for p in paths)


def test_manager_cancel_then_resume(client, fake_hub, models_dir):
    fake_hub.stall_after[MAIN_FILE] = 100_000
    model = _model(client, TINY_REPO, MAIN_FILE)
    updates = []

    async def main():
        manager = DownloadManager(client, models_dir, asyncio.get_running_loop(),
                                  lambda job: updates.append(job.state))
        job = manager.start(model)
        assert manager.start(model) is job, "a running download is not started twice"
        partial = partial_path(local_path(models_dir, TINY_REPO, MAIN_FILE))
        while not (partial.exists() and partial.stat().st_size >= 100_000):
            await asyncio.sleep(0.01)
        manager.cancel(job.key)
        await job.task
        assert job.state == "paused" and "resumes" in job.message
        fake_hub.release.set()
        again = manager.start(model)
        await again.task
        manager.shutdown()
        return job, again

    job, again = asyncio.run(main())
    assert again is not job and again.state == "done"
    assert again.path.read_bytes() == fake_hub.repos[TINY_REPO].files[MAIN_FILE]
    assert fake_hub.file_requests(MAIN_FILE)[-1].headers.get("Range") == "bytes=100000-"
    assert updates[0] == "queued" and updates[-1] == "done"
    assert {"downloading", "paused"} <= set(updates)


def test_cancelling_the_asyncio_task_stops_the_transfer(client, fake_hub, models_dir):
    fake_hub.stall_after[MAIN_FILE] = 100_000
    model = _model(client, TINY_REPO, MAIN_FILE)

    async def main():
        task = asyncio.create_task(download_model(client, model, models_dir))
        partial = partial_path(local_path(models_dir, TINY_REPO, MAIN_FILE))
        while not (partial.exists() and partial.stat().st_size >= 100_000):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert partial_path(local_path(models_dir, TINY_REPO, MAIN_FILE)).stat().st_size == 100_000


def test_a_refused_download_leaves_nothing_to_resume(client, models_dir):
    from app.models.hub import FilePart, RemoteModel

    ghost = RemoteModel(TINY_REPO, "main", (FilePart("gone.gguf", 1000, None),), "?")
    with pytest.raises(HubError, match="no such file"):
        download_model_blocking(client, ghost, models_dir)
    assert pending_downloads(models_dir) == []
    assert [p for p in models_dir.rglob("*") if p.is_file()] == []
