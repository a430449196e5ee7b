"""What the model manager's views share, with no widgets: the models folder, the hub client, the
downloads and the asyncio plumbing on Qt's event loop.

One session can serve several views (the dialog's tabs, the first-run panel): each listens to
``job_updated`` for downloads and ``problem`` for errors a background task raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor

import shiboken6
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication

from app.core.errors import QuickdraftError
from app.models.catalog import CatalogPair
from app.models.download import DownloadJob, DownloadManager
from app.models.hub import HubClient
from app.models.memory import Fit, MachineMemory, judge_fit, machine_memory
from app.models.recommend import pair_speed
from app.models.registry import InstalledModel, ModelRegistry
from app.models.speed import Speed
from app.paths import AppPaths

HubFactory = Callable[[str | None], HubClient]
_SHARED_LOOP: asyncio.AbstractEventLoop | None = None


def qt_event_loop() -> asyncio.AbstractEventLoop:
    """The asyncio loop running on Qt's event loop: the running one, or a qasync loop over the running
    QApplication (created once per process)."""
    global _SHARED_LOOP
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    if _SHARED_LOOP is None or _SHARED_LOOP.is_closed():
        import qasync

        _SHARED_LOOP = qasync.QEventLoop(QApplication.instance(), already_running=True)
        asyncio.set_event_loop(_SHARED_LOOP)
    return _SHARED_LOOP


class ManagerSession(QObject):
    """Hub requests and downloads as asyncio tasks; their blocking parts run in worker threads.

    ``job_updated(DownloadJob)`` reports every change of a download; ``problem(str)`` an error raised
    by a task started with ``spawn``; ``models_changed()`` a download that finished installing."""

    job_updated = Signal(object)
    problem = Signal(str)
    models_changed = Signal()

    def __init__(self, paths: AppPaths, *, hub_factory: HubFactory | None = None,
                 loop: asyncio.AbstractEventLoop | None = None, machine: MachineMemory | None = None,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.paths = paths.ensure()
        self.registry = ModelRegistry(self.paths.models_dir)
        self.hub_factory = hub_factory or (lambda token: HubClient(token=token))
        self.machine = machine or machine_memory()
        self.loop = loop or qt_event_loop()
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hub")
        self.client = self.hub_factory(None)
        self.downloads = DownloadManager(self.client, self.paths.models_dir, self.loop, self._job_changed)
        self.tasks: set[asyncio.Task] = set()
        app = QApplication.instance()
        if app is not None:  # at exit, pause downloads so no worker thread holds the process open
            downloads, executor = self.downloads, self.executor
            app.aboutToQuit.connect(lambda: (downloads.shutdown(), executor.shutdown(wait=False, cancel_futures=True)))

    def set_token(self, token: str | None) -> None:
        if token != self.client.token:
            self.client = self.hub_factory(token)
            self.downloads.client = self.client

    def fit(self, needed: int) -> Fit:
        return judge_fit(needed, self.machine)

    def speed(self, pair: CatalogPair) -> Speed | None:
        """How fast the pair's main model can be expected to write here (None: the cores are unknown)."""
        return pair_speed(pair, self.machine)

    # --- downloads ----------------------------------------------------------------------------------

    def start_download(self, model) -> DownloadJob:
        return self.downloads.start(model)

    async def download_pair(self, pair: CatalogPair, installed: list[InstalledModel]) -> list[DownloadJob]:
        """Start downloading whichever of the pair's two models is not installed yet."""
        jobs = []
        for wanted in (pair.main, pair.draft):
            if wanted.find_installed(self.paths.models_dir, installed) is None:
                model = await self.run_blocking(self.client.resolve, wanted.repo_id, wanted.filename)
                jobs.append(self.start_download(model))
        return jobs

    def _job_changed(self, job: DownloadJob) -> None:
        if not shiboken6.isValid(self):   # a download ended after its window was destroyed
            return
        self.job_updated.emit(job)
        if job.state == "done":
            self.models_changed.emit()

    # --- async plumbing -------------------------------------------------------------------------------

    async def run_blocking(self, fn, *args):
        return await self.loop.run_in_executor(self.executor, fn, *args)

    def spawn(self, coro: Coroutine) -> asyncio.Task:
        """Run ``coro`` on the loop; a QuickdraftError or OSError it raises becomes a ``problem``."""
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, (QuickdraftError, OSError)):
            self.problem.emit(str(exc))
        elif exc is not None:
            self.problem.emit(f"Unexpected error: {exc!r}")

    @property
    def busy(self) -> bool:
        return bool(self.tasks) or self.downloads.active_count > 0

    def pause_all(self) -> None:
        """Pause the downloads (they resume next time) and drop pending hub requests."""
        self.downloads.cancel_all()
        for task in list(self.tasks):
            task.cancel()

    def shutdown(self) -> None:
        """At application exit: pause everything and release the worker threads."""
        self.pause_all()
        self.downloads.shutdown()
        self.executor.shutdown(wait=False, cancel_futures=True)
