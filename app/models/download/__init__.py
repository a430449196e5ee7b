"""Resumable, verified downloads of GGUF models from the Hugging Face Hub.

``partial``: where files go and the bookkeeping of unfinished downloads; ``transfer``: one model's
HTTP streaming, resume and SHA-256 check (blocking, in a worker thread); ``manager``: the asyncio face
and ``DownloadManager``, several downloads at once, cancellable.
"""

from app.models.diskspace import NotEnoughSpaceError, check_disk_space, format_bytes
from app.models.download.manager import DownloadJob, DownloadManager, download_model
from app.models.download.partial import (PENDING_SUFFIX, PARTIAL_SUFFIX, DownloadError, PendingDownload, discard_pending, download_key,
                      local_path, partial_path, pending_downloads, pending_path, read_pending)
from app.models.download.transfer import CancelToken, DownloadCancelled, Progress, ProgressCallback, download_model_blocking

__all__ = [
    "PARTIAL_SUFFIX", "PENDING_SUFFIX", "CancelToken", "DownloadCancelled", "DownloadError", "DownloadJob",
    "DownloadManager", "NotEnoughSpaceError", "PendingDownload", "Progress", "ProgressCallback", "check_disk_space",
    "discard_pending", "download_key", "download_model", "download_model_blocking", "format_bytes", "local_path",
    "partial_path", "pending_downloads", "pending_path", "read_pending",
]
