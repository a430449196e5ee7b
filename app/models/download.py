"""Resumable, verified downloads of GGUF models from the Hugging Face Hub.

A model (one file, or every part of a split file) downloads into ``models_dir/<owner>/<repo>/``.
Bytes go to ``<file>.incomplete`` next to the target; an interrupted download (cancel, network drop,
app quit) continues from there with an HTTP Range request, through huggingface_hub's own HTTP session.
A finished file is checked against the hub's SHA-256 before it is renamed into place, so the models
list never shows a half-written or corrupt file. ``<file>.download.json`` remembers what a partial
download was, so it can be resumed after a restart.

``download_model_blocking`` is the worker (runs in a thread); ``download_model`` is its asyncio face
(the blocking work in an executor), and ``DownloadManager`` keeps several of them going, cancellable.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.core.errors import QuickdraftError

from .diskspace import NotEnoughSpaceError, check_disk_space, format_bytes, format_duration
from .hub import FilePart, HubClient, HubError, RemoteModel, hub_errors, is_safe_hub_path
from .registry import ModelRegistry

PROGRESS_INTERVAL_S = 0.1
TICK_S = 0.5
MAX_RETRIES = 3                 # transport errors in a row (progress resets the count)
RETRY_DELAY_S = 0.5
PARTIAL_SUFFIX = ".incomplete"
PENDING_SUFFIX = ".download.json"


class DownloadError(QuickdraftError):
    """A download failed; the message says why and what to do."""


class DownloadCancelled(QuickdraftError):
    """The download was stopped; what was downloaded is kept for a resume."""


@dataclass(frozen=True)
class Progress:
    label: str
    done: int
    total: int
    speed: float            # bytes per second, over the last few seconds
    eta_s: float | None
    stage: str = "downloading"   # downloading | verifying | done

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    def describe(self) -> str:
        if self.stage == "verifying":
            return f"verifying SHA-256… {format_bytes(self.done)} of {format_bytes(self.total)}"
        if self.stage == "done":
            return f"done, {format_bytes(self.total)}"
        eta = f", {format_duration(self.eta_s)} left" if self.eta_s is not None else ""
        return f"{format_bytes(self.done)} of {format_bytes(self.total)} at {format_bytes(self.speed)}/s{eta}"


ProgressCallback = Callable[[Progress], None]


class CancelToken:
    """A stop request a download checks between chunks; it also closes the response being read, so a
    stalled connection stops at once instead of at its read timeout."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._responses: list = []

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            responses = list(self._responses)
        for response in responses:
            _interrupt(response)

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(seconds)

    @contextlib.contextmanager
    def watching(self, response):
        with self._lock:
            self._responses.append(response)
        try:
            yield response
        finally:
            with self._lock:
                self._responses.remove(response)


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


# --- the worker ------------------------------------------------------------------------------------

class _Meter:
    """Counts bytes, computes speed and ETA over a sliding window, reports at most 10 times a second."""

    def __init__(self, label: str, total: int, done: int, report: ProgressCallback | None):
        self.label, self.total, self.done, self.report = label, total, done, report
        self.stage = "downloading"
        self.samples: deque[tuple[float, int]] = deque([(time.monotonic(), done)], maxlen=50)
        self.samples_lock = threading.Lock()   # the worker appends, the event loop's heartbeat reads
        self.last_report = 0.0

    def add(self, n: int) -> None:
        self.done += n
        self.emit()

    def set(self, done: int, stage: str | None = None) -> None:
        self.done = done
        self.stage = stage or self.stage
        self.emit(force=True)

    def restart_part(self, lost: int) -> None:
        """The server ignored a Range request: the bytes of this part count again from zero."""
        self.set(self.done - lost)

    def verifying(self, hashed: int, total: int) -> None:
        now = time.monotonic()
        if self.report is not None and (now - self.last_report >= PROGRESS_INTERVAL_S or hashed == total):
            self.last_report = now
            self.report(Progress(self.label, hashed, total, 0.0, None, "verifying"))

    def snapshot(self) -> Progress:
        """The progress now, speed included (it falls towards zero while the connection stalls)."""
        now = time.monotonic()
        with self.samples_lock:
            samples = list(self.samples)
        recent = [(t, d) for t, d in samples if now - t <= 3.0] or samples[-1:]
        t0, d0 = recent[0]
        speed = (self.done - d0) / (now - t0) if now > t0 and self.stage == "downloading" else 0.0
        eta = (self.total - self.done) / speed if speed > 0 else None
        return Progress(self.label, self.done, self.total, speed, eta, self.stage)

    def emit(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.report is None or (not force and now - self.last_report < PROGRESS_INTERVAL_S):
            return
        self.last_report = now
        with self.samples_lock:
            self.samples.append((now, self.done))
        self.report(self.snapshot())


def download_model_blocking(client: HubClient, model: RemoteModel, models_dir: Path,
                            report: ProgressCallback | None = None,
                            cancel: CancelToken | None = None, meters: list | None = None) -> Path:
    """Download (or resume) every part of ``model``, verify it, register it; the first part's path.

    ``report`` gets progress at most 10 times a second while bytes arrive; ``meters`` (a list) receives
    the live meter, for a caller that wants to poll progress through a stall."""
    cancel = cancel or CancelToken()
    dests = [local_path(models_dir, model.repo_id, p.filename) for p in model.parts]
    first = dests[0]
    _discard_stale_partials(model, dests)
    have = sum(_size(partial_path(d)) for d, p in zip(dests, model.parts) if not d.exists())
    done_parts = sum(p.size for d, p in zip(dests, model.parts) if d.exists())
    check_disk_space(first.parent, model.size - done_parts - have)
    meter = _Meter(model.label, model.size, done_parts + have, report)
    if meters is not None:
        meters.append(meter)
    try:
        with _disk_errors(model):
            _write_pending(model, first)
            for part, dest in zip(model.parts, dests):
                if not dest.exists():
                    _download_part(client, model, part, dest, meter, cancel)
    except BaseException:
        if not any(partial_path(d).exists() or d.exists() for d in dests):
            pending_path(first).unlink(missing_ok=True)   # nothing to resume: forget it
        raise
    pending_path(first).unlink(missing_ok=True)
    ModelRegistry(models_dir).record_download(first, model.repo_id, model.filename, model.revision,
                                              [p.sha256 or "" for p in model.parts])
    meter.set(model.size, "done")
    return first


def _download_part(client: HubClient, model: RemoteModel, part: FilePart, dest: Path, meter: _Meter,
                   cancel: CancelToken) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(dest)
    failures = 0
    while _size(partial) < part.size:
        before = _size(partial)
        if cancel.is_set():
            raise _cancelled(model, meter)
        try:
            _stream_into(client, model, part, partial, meter, cancel)
        except Exception as exc:
            if cancel.is_set():   # closing the response under a read raises whatever the read was doing
                raise _cancelled(model, meter) from None
            if not isinstance(exc, _transport_errors()):
                raise
            failures = 0 if _size(partial) > before else failures + 1
            if failures >= MAX_RETRIES:
                raise DownloadError(
                    f"The connection to Hugging Face dropped while downloading {part.filename} ({exc}). "
                    f"{format_bytes(meter.done)} of {format_bytes(meter.total)} is kept: "
                    f"download it again to resume."
                ) from exc
            cancel.wait(RETRY_DELAY_S * failures)
    if _size(partial) > part.size:
        partial.unlink()
        raise DownloadError(f"The server sent more bytes than {part.filename} has; the partial file was "
                            f"deleted. Download it again.")
    _verify(part, partial, meter, cancel, model)
    partial.replace(dest)


def _timeout():
    """Connect and read timeouts: a stalled connection becomes an error that resumes with Range."""
    import httpx2
    from huggingface_hub import constants

    return httpx2.Timeout(constants.HF_HUB_DOWNLOAD_TIMEOUT, connect=constants.HF_HUB_DOWNLOAD_TIMEOUT)


def _transport_errors() -> tuple[type[Exception], ...]:
    import httpx2

    return (httpx2.TransportError,)


def _stream_into(client: HubClient, model: RemoteModel, part: FilePart, partial: Path, meter: _Meter,
                 cancel: CancelToken) -> None:
    """One GET of the rest of ``part`` (a Range request when some of it is already there)."""
    from huggingface_hub.utils import http_stream_backoff, hf_raise_for_status

    have = _size(partial)
    headers = client.headers()
    if have:
        headers["Range"] = f"bytes={have}-"
    url = client.file_url(model.repo_id, part.filename, model.revision)
    with http_stream_backoff(
        "GET", url, headers=headers, retry_on_exceptions=(), max_retries=2, base_wait_time=0.5,
        timeout=_timeout(),
    ) as response, cancel.watching(response):
        with hub_errors(f"download {part.filename}"):
            hf_raise_for_status(response)
        if have and response.status_code != 206:   # the server ignored the Range: start over
            meter.restart_part(have)
            have = 0
        with partial.open("ab" if have else "wb") as out:
            for chunk in response.iter_bytes():  # as it arrives: what was received is kept on a drop
                if cancel.is_set():
                    raise _cancelled(model, meter)
                _write(out, chunk, partial)
                meter.add(len(chunk))


def _write(out, chunk: bytes, partial: Path) -> None:
    try:
        out.write(chunk)
        out.flush()   # what arrived is on disk: a crash or a kill loses nothing of it
    except OSError as exc:
        with contextlib.suppress(OSError):
            out.close()   # closing flushes what is buffered, and fails the same way on a full disk
        if exc.errno != errno.ENOSPC:
            raise DownloadError(f"Could not write {partial.name}: {exc.strerror or exc}") from exc
        partial.unlink(missing_ok=True)
        raise NotEnoughSpaceError(f"The disk filled up while downloading {partial.name}; the partial file was "
                                  f"deleted. Free some space and download it again.") from exc


@contextlib.contextmanager
def _disk_errors(model: RemoteModel):
    """A file operation of the download that fails (a full disk, a read-only folder) as a DownloadError."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise NotEnoughSpaceError(f"The disk filled up while downloading {model.label}. Free some space "
                                      f"and download it again.") from exc
        raise DownloadError(f"Could not write {model.label} into the models folder: {exc.strerror or exc}"
                            f"{f' ({exc.filename})' if exc.filename else ''}.") from exc


def _verify(part: FilePart, partial: Path, meter: _Meter, cancel: CancelToken, model: RemoteModel) -> None:
    """Compare the finished file with the hub's SHA-256; a mismatch deletes it."""
    if not part.sha256:
        return  # not an LFS file: the hub publishes no SHA-256; the size was checked
    digest = hashlib.sha256()
    hashed = 0
    with partial.open("rb") as f:
        while block := f.read(4 * 1024 * 1024):
            if cancel.is_set():
                raise _cancelled(model, meter)
            digest.update(block)
            hashed += len(block)
            meter.verifying(hashed, part.size)
    if digest.hexdigest() != part.sha256.lower():
        partial.unlink()
        raise DownloadError(
            f"{part.filename} is corrupt: its SHA-256 is {digest.hexdigest()[:16]}… but Hugging Face says "
            f"{part.sha256[:16]}…. The file was deleted; download it again."
        )


def _cancelled(model: RemoteModel, meter: _Meter) -> DownloadCancelled:
    return DownloadCancelled(f"Download of {model.label} paused at {format_bytes(meter.done)} of "
                             f"{format_bytes(meter.total)}; it resumes from there next time.")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _interrupt(response) -> None:
    """Wake a thread blocked reading ``response``: shut its socket down (closing alone does not)."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)


# --- partial downloads remembered across restarts --------------------------------------------------

def _write_pending(model: RemoteModel, first: Path) -> None:
    first.parent.mkdir(parents=True, exist_ok=True)
    data = {"repo_id": model.repo_id, "revision": model.revision, "quantization": model.quantization,
            "parts": [asdict(p) for p in model.parts]}
    pending_path(first).write_text(json.dumps(data, indent=1), encoding="utf-8")


def _discard_stale_partials(model: RemoteModel, dests: list[Path]) -> None:
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
        done = sum(p.size if d.exists() else _size(partial_path(d)) for d, p in zip(dests, model.parts))
        found.append(PendingDownload(model, done))
    return found


def discard_pending(models_dir: Path, model: RemoteModel) -> None:
    """Forget a partial download and delete its bytes."""
    for part in model.parts:
        partial_path(local_path(models_dir, model.repo_id, part.filename)).unlink(missing_ok=True)
    pending_path(local_path(models_dir, model.repo_id, model.filename)).unlink(missing_ok=True)


def download_key(model: RemoteModel) -> str:
    return f"{model.repo_id}/{model.filename}"


# --- asyncio -----------------------------------------------------------------------------------------

async def download_model(client: HubClient, model: RemoteModel, models_dir: Path,
                         on_progress: ProgressCallback | None = None, cancel: CancelToken | None = None,
                         executor: Executor | None = None) -> Path:
    """Download ``model`` without blocking the event loop; progress is delivered on the loop's thread.

    Cancelling the awaiting task stops the transfer (the partial file stays for a resume)."""
    loop = asyncio.get_running_loop()
    cancel = cancel or CancelToken()

    def report(progress: Progress) -> None:
        if on_progress is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed under a stopping download
                loop.call_soon_threadsafe(on_progress, progress)

    meters: list[_Meter] = []
    work = loop.run_in_executor(executor, download_model_blocking, client, model, Path(models_dir), report,
                                cancel, meters)
    try:
        while not work.done():   # a heartbeat, so a stalled connection shows its speed falling
            await asyncio.wait({work}, timeout=TICK_S)
            if meters and on_progress is not None and not work.done() and meters[0].stage == "downloading":
                on_progress(meters[0].snapshot())
        return work.result()
    except asyncio.CancelledError:
        cancel.cancel()
        with contextlib.suppress(Exception):
            await work
        raise


@dataclass
class DownloadJob:
    model: RemoteModel
    state: str = "queued"                 # queued | downloading | verifying | done | paused | failed
    progress: Progress | None = None
    message: str = ""
    path: Path | None = None
    cancel_event: CancelToken = field(default_factory=CancelToken)
    task: asyncio.Task | None = None

    @property
    def key(self) -> str:
        return download_key(self.model)

    @property
    def active(self) -> bool:
        return self.state in ("queued", "downloading", "verifying")


class DownloadManager:
    """Several downloads as asyncio tasks on one loop; ``on_update(job)`` runs on the loop's thread."""

    def __init__(self, client: HubClient, models_dir: Path, loop: asyncio.AbstractEventLoop,
                 on_update: Callable[[DownloadJob], None] | None = None, max_workers: int = 4):
        self.client, self.models_dir, self.loop = client, Path(models_dir), loop
        self.on_update = on_update or (lambda job: None)
        self.executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="download")
        self.jobs: dict[str, DownloadJob] = {}

    def start(self, model: RemoteModel) -> DownloadJob:
        """Start (or resume) a download; one already running for the same model is returned as is."""
        key = download_key(model)
        if key in self.jobs and self.jobs[key].active:
            return self.jobs[key]
        job = DownloadJob(model)
        self.jobs[key] = job
        job.task = self.loop.create_task(self._run(job))
        self.on_update(job)
        return job

    def cancel(self, key: str) -> None:
        job = self.jobs.get(key)
        if job and job.active:
            job.cancel_event.cancel()

    def cancel_all(self) -> None:
        for key in list(self.jobs):
            self.cancel(key)

    def shutdown(self) -> None:
        """Stop every download (they resume next time) and release the worker threads."""
        self.cancel_all()
        self.executor.shutdown(wait=False, cancel_futures=True)

    @property
    def active_count(self) -> int:
        return sum(job.active for job in self.jobs.values())

    async def _run(self, job: DownloadJob) -> None:
        job.state = "downloading"
        try:
            job.path = await download_model(self.client, job.model, self.models_dir,
                                            lambda p: self._progress(job, p), job.cancel_event, self.executor)
            job.state, job.message = "done", f"Downloaded {job.model.label}"
        except DownloadCancelled as exc:
            job.state, job.message = "paused", str(exc)
        except (QuickdraftError, HubError) as exc:
            job.state, job.message = "failed", str(exc)
        except asyncio.CancelledError:
            job.state, job.message = "paused", f"Download of {job.model.label} paused."
            self.on_update(job)
            raise
        except Exception as exc:  # an unexpected error must reach the user, not vanish in a task
            job.state, job.message = "failed", f"Download of {job.model.label} failed: {exc!r}"
        self.on_update(job)

    def _progress(self, job: DownloadJob, progress: Progress) -> None:
        if not job.active:
            return
        job.progress = progress
        job.state = "verifying" if progress.stage == "verifying" else job.state
        if progress.stage == "downloading":
            job.state = "downloading"
        self.on_update(job)


__all__ = [
    "CancelToken", "DownloadCancelled", "DownloadError", "DownloadJob", "DownloadManager", "NotEnoughSpaceError", "Progress",
    "PendingDownload", "check_disk_space", "discard_pending", "download_model", "download_model_blocking",
    "format_bytes", "local_path", "partial_path", "pending_downloads",
]
