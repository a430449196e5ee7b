"""Downloads on an asyncio loop: ``download_model`` runs one transfer in an executor without blocking
the loop (progress arrives on the loop's thread, with a heartbeat through stalls), and
``DownloadManager`` keeps several going, each cancellable and resumable."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from app.core.errors import QuickdraftError
from app.models.download.partial import download_key
from app.models.download.transfer import CancelToken, DownloadCancelled, Progress, ProgressCallback, Meter, download_model_blocking
from app.models.hub import HubClient, HubError, RemoteModel

TICK_S = 0.5


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

    meters: list[Meter] = []
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
