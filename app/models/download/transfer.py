"""One model's transfer from the Hugging Face Hub: HTTP streaming into the partial file, resumed
with a Range request after a cancel, a network drop or an app quit (through huggingface_hub's own HTTP
session), retries, progress with speed and ETA, and the SHA-256 check before the file is renamed into
place, so the models list never shows a half-written or corrupt file.

``download_model_blocking`` runs in a worker thread; app.models.download.manager is its asyncio face.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import QuickdraftError
from app.models.diskspace import NotEnoughSpaceError, check_disk_space, file_size, format_bytes, format_duration
from app.models.download.partial import (DownloadError, discard_stale_partials, local_path, partial_path, pending_path,
                      write_pending)
from app.models.hub import FilePart, HubClient, RemoteModel, hub_errors, network_reason
from app.models.registry import ModelRegistry

PROGRESS_INTERVAL_S = 0.1
MAX_RETRIES = 3                 # transport errors in a row (progress resets the count)
RETRY_DELAY_S = 0.5


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


class Meter:
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
    discard_stale_partials(model, dests)
    have = sum(file_size(partial_path(d)) for d, p in zip(dests, model.parts) if not d.exists())
    done_parts = sum(p.size for d, p in zip(dests, model.parts) if d.exists())
    check_disk_space(first.parent, model.size - done_parts - have)
    meter = Meter(model.label, model.size, done_parts + have, report)
    if meters is not None:
        meters.append(meter)
    try:
        with _disk_errors(model):
            write_pending(model, first)
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


def _download_part(client: HubClient, model: RemoteModel, part: FilePart, dest: Path, meter: Meter,
                   cancel: CancelToken) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(dest)
    failures = 0
    while file_size(partial) < part.size:
        before = file_size(partial)
        if cancel.is_set():
            raise _cancelled(model, meter)
        try:
            _stream_into(client, model, part, partial, meter, cancel)
        except Exception as exc:
            if cancel.is_set():   # closing the response under a read raises whatever the read was doing
                raise _cancelled(model, meter) from None
            if not isinstance(exc, _transport_errors()):
                raise
            failures = 0 if file_size(partial) > before else failures + 1
            if failures >= MAX_RETRIES:
                raise DownloadError(
                    f"The connection to Hugging Face dropped while downloading {part.filename} "
                    f"({network_reason(exc)}). "
                    f"{format_bytes(meter.done)} of {format_bytes(meter.total)} is kept: "
                    f"download it again to resume."
                ) from exc
            cancel.wait(RETRY_DELAY_S * failures)
    if file_size(partial) > part.size:
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


def _stream_into(client: HubClient, model: RemoteModel, part: FilePart, partial: Path, meter: Meter,
                 cancel: CancelToken) -> None:
    """One GET of the rest of ``part`` (a Range request when some of it is already there)."""
    from huggingface_hub.utils import http_stream_backoff, hf_raise_for_status

    have = file_size(partial)
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


def _verify(part: FilePart, partial: Path, meter: Meter, cancel: CancelToken, model: RemoteModel) -> None:
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


def _cancelled(model: RemoteModel, meter: Meter) -> DownloadCancelled:
    return DownloadCancelled(f"Download of {model.label} paused at {format_bytes(meter.done)} of "
                             f"{format_bytes(meter.total)}; it resumes from there next time.")


def _interrupt(response) -> None:
    """Wake a thread blocked reading ``response``: shut its socket down (closing alone does not)."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
