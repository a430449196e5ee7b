"""Hugging Face Hub: search GGUF repositories, list their GGUF files, read a model card's summary.

Everything goes through huggingface_hub (HfApi and its shared HTTP session); the endpoint and token
are passed in, so tests point a HubClient at a local fake hub.
"""

from __future__ import annotations

import contextlib
import re
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from app.core.errors import QuickdraftError

SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
QUANT_RE = re.compile(
    r"(?:^|[-_.])(I?Q\d(?:_[A-Z0-9]{1,2}){0,2}|BF16|F16|FP16|F32|TQ\d_\d|MXFP4)(?=[-_.]|$)", re.IGNORECASE
)
SUMMARY_MAX_CHARS = 600


class HubError(QuickdraftError):
    """Hugging Face could not be reached or refused a request (message written for the user)."""


@dataclass(frozen=True)
class RepoResult:
    repo_id: str
    downloads: int
    likes: int
    last_modified: datetime | None
    gated: bool


@dataclass(frozen=True)
class FilePart:
    filename: str
    size: int
    sha256: str | None


@dataclass(frozen=True)
class RemoteModel:
    """One downloadable model of a repository: a GGUF file, or all the parts of a split GGUF."""

    repo_id: str
    revision: str
    parts: tuple[FilePart, ...]
    quantization: str

    @property
    def filename(self) -> str:
        return self.parts[0].filename

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def is_split(self) -> bool:
        return len(self.parts) > 1

    @property
    def label(self) -> str:
        name = self.filename.rsplit("/", 1)[-1]
        return f"{name} (+{len(self.parts) - 1} parts)" if self.is_split else name


def is_safe_hub_path(name: str) -> bool:
    """Whether a repository id or file name from the hub stays inside the folder it is joined to, on
    every OS: relative, no ``..`` or ``.`` parts, no backslash, drive colon or NUL."""
    if not isinstance(name, str) or not name or name.startswith("/") or any(c in name for c in "\\:\0"):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def quantization_from_name(filename: str) -> str:
    """The quantization a GGUF file name states (``...-Q4_K_M.gguf`` -> ``Q4_K_M``), else ``?``."""
    base = filename.rsplit("/", 1)[-1]
    split = SPLIT_RE.match(base)
    stem = split.group("stem") if split else base.removesuffix(".gguf").removesuffix(".GGUF")
    found = QUANT_RE.findall(stem)
    return found[-1].upper() if found else "?"


def group_gguf_files(repo_id: str, revision: str, parts: list[FilePart]) -> list[RemoteModel]:
    """GGUF files of a repository as models: split files (``x-00001-of-00003.gguf``) become one model.

    Vision projectors (``mmproj-*.gguf``) are left out: they are not chat models.
    """
    singles: list[RemoteModel] = []
    splits: dict[tuple[str, str], list[FilePart]] = {}
    for part in parts:
        base = part.filename.rsplit("/", 1)[-1]
        if not base.lower().endswith(".gguf") or base.lower().startswith("mmproj"):
            continue
        if not is_safe_hub_path(part.filename):   # a name like ../x.gguf is never offered, never written
            continue
        match = SPLIT_RE.match(part.filename)
        if match:
            splits.setdefault((match.group("stem"), match.group("count")), []).append(part)
        else:
            singles.append(RemoteModel(repo_id, revision, (part,), quantization_from_name(part.filename)))
    for (_stem, count), group in splits.items():
        group.sort(key=lambda p: p.filename)
        if len(group) == int(count):  # an incomplete upload is not offered
            singles.append(RemoteModel(repo_id, revision, tuple(group), quantization_from_name(group[0].filename)))
    return sorted(singles, key=lambda m: m.filename.lower())


class HubClient:
    """Search and list through huggingface_hub, against ``endpoint`` (default: the hub's)."""

    def __init__(self, endpoint: str | None = None, token: str | None = None):
        from huggingface_hub import HfApi, constants

        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self.token = token or None
        self.api = HfApi(endpoint=self.endpoint, token=self.token)

    def search(self, query: str, limit: int = 40) -> list[RepoResult]:
        """GGUF repositories matching ``query``, most downloaded first."""
        if not query.strip():
            raise HubError("Type something to search for, for example 'qwen2.5 coder'.")
        with self._asking(f"search for {query!r}"):
            found = self.api.list_models(search=query.strip(), filter="gguf", sort="downloads", limit=limit)
            return [
                RepoResult(m.id, int(m.downloads or 0), int(m.likes or 0), m.last_modified, bool(m.gated))
                for m in found
            ]

    def list_models(self, repo_id: str, revision: str = "main") -> list[RemoteModel]:
        """The GGUF models of a repository, with sizes, quantization and SHA-256."""
        check_repo_id(repo_id)
        with self._asking(f"list the files of {repo_id}"):
            info = self.api.model_info(repo_id, revision=revision, files_metadata=True)
        parts = [
            FilePart(s.rfilename, int(s.lfs.size if s.lfs else (s.size or 0)), s.lfs.sha256 if s.lfs else None)
            for s in info.siblings or []
        ]
        return group_gguf_files(repo_id, revision, parts)

    def resolve(self, repo_id: str, filename: str, revision: str = "main") -> RemoteModel:
        """The model a file name belongs to (any part of a split file names the whole model)."""
        for model in self.list_models(repo_id, revision):
            if any(p.filename == filename for p in model.parts):
                return model
        raise HubError(f"{repo_id} has no GGUF file named {filename!r}. "
                       f"List its files with: quickdraft models files {repo_id}")

    @contextlib.contextmanager
    def _asking(self, action: str) -> Iterator[None]:
        """The hub asked, its errors in words; first the hub's name looked up (``name_lookup_error``)."""
        problem = name_lookup_error(self.endpoint)
        if problem:
            raise HubError(f"Could not {action}: Hugging Face cannot be reached: {problem}. "
                           f"Check the network connection.")
        with hub_errors(action):
            yield

    def file_url(self, repo_id: str, filename: str, revision: str = "main") -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(repo_id, filename, revision=revision, endpoint=self.endpoint)

    def headers(self) -> dict[str, str]:
        from huggingface_hub.utils import build_hf_headers

        return build_hf_headers(token=self.token)

    def card_summary(self, repo_id: str, revision: str = "main") -> str | None:
        """The first paragraphs of the repository's README (front matter left out), or None."""
        from huggingface_hub.utils import get_session, hf_raise_for_status

        check_repo_id(repo_id)
        with self._asking(f"read the model card of {repo_id}"):
            response = get_session().get(self.file_url(repo_id, "README.md", revision), headers=self.headers())
            if response.status_code == 404:
                return None
            hf_raise_for_status(response)
        return summarize_card(response.text)


def check_repo_id(repo_id: str) -> None:
    """Refuse, with a HubError, what is not an ``owner/name`` repository id the hub would accept."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        valid = False
    else:
        valid = is_safe_hub_path(repo_id)
    if not valid:
        raise HubError(f"{repo_id!r} is not a Hugging Face repository id: use owner/name, for example "
                       f"bartowski/Qwen2.5-Coder-7B-Instruct-GGUF.")


def summarize_card(text: str) -> str | None:
    """A short plain summary of a model card: the first prose paragraphs after the YAML header."""
    if text.startswith("---"):
        end = text.find("\n---", 3)
        text = text[end + 4:] if end != -1 else ""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block or block.startswith(("#", "|", "<", "```", "![", "[!")):
            continue
        paragraphs.append(_plain(" ".join(line.strip() for line in block.splitlines())))
        if sum(len(p) for p in paragraphs) >= SUMMARY_MAX_CHARS:
            break
    summary = "\n\n".join(paragraphs)
    if len(summary) > SUMMARY_MAX_CHARS:
        summary = summary[:SUMMARY_MAX_CHARS].rsplit(" ", 1)[0] + "…"
    return summary or None


def _plain(markdown: str) -> str:
    """Markdown emphasis, code and links as plain text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"(\*\*|__|\*|`)(.+?)\1", r"\2", text)
    return text


@contextlib.contextmanager
def hub_errors(action: str) -> Iterator[None]:
    """Turn huggingface_hub and network errors into a HubError that says what to do."""
    import httpx2
    from huggingface_hub import errors

    try:
        yield
    except errors.GatedRepoError as exc:
        raise HubError(f"Could not {action}: the repository is gated. Accept its license on huggingface.co "
                       f"and set a Hugging Face token (HF_TOKEN, `hf auth login`, or the token field).") from exc
    except errors.RepositoryNotFoundError as exc:
        raise HubError(f"Could not {action}: no such repository (or it is private and needs a token).") from exc
    except errors.RevisionNotFoundError as exc:
        raise HubError(f"Could not {action}: no such revision.") from exc
    except errors.EntryNotFoundError as exc:
        raise HubError(f"Could not {action}: no such file in the repository.") from exc
    except errors.OfflineModeIsEnabled as exc:
        raise HubError(f"Could not {action}: offline mode is on (HF_HUB_OFFLINE is set).") from exc
    except errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise HubError(f"Could not {action}: Hugging Face answered HTTP {status}.") from exc
    except httpx2.TransportError as exc:
        raise HubError(f"Could not {action}: Hugging Face cannot be reached: {network_reason(exc)}. "
                       f"Check the network connection.") from exc


def name_lookup_error(endpoint: str) -> str:
    """Why the endpoint's host name cannot be looked up, in words; "" when it can (or a proxy looks it
    up). Asked before each request: huggingface_hub tries a connection that fails five more times,
    waiting 1 to 8 s between (about 25 s), and a name that does not resolve does not resolve a second
    later: the user waited half a minute for one message."""
    parts = urlsplit(endpoint)
    host = parts.hostname
    if not host or (urllib.request.getproxies() and not urllib.request.proxy_bypass(host)):
        return ""
    try:
        socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return network_reason(exc)
    except (OSError, UnicodeError):   # another failure: the request itself reports it
        return ""
    return ""


# what the C library says when a host name cannot be looked up (Linux, macOS, Windows)
_NAME_NOT_FOUND = ("name or service not known", "nodename nor servname", "getaddrinfo failed",
                   "temporary failure in name resolution", "no address associated with hostname")


def network_reason(exc: BaseException) -> str:
    """Why a connection failed, in words: the errors themselves read "[Errno -2] Name or service not
    known" or "ConnectTimeout", which say little to a user. The cause is found along the chain of
    errors (the transport library wraps the socket's)."""
    import socket

    chain, seen = [], exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(e) for e in chain).lower()
    if any(isinstance(e, socket.gaierror) for e in chain) or any(m in text for m in _NAME_NOT_FOUND):
        return "its address could not be looked up (no network connection, or the name server does not answer)"
    if any(isinstance(e, TimeoutError) or "timeout" in type(e).__name__.lower() for e in chain):
        return "it did not answer in time"
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "refused" in text:
        return "the connection was refused"
    if any(isinstance(e, ConnectionError) for e in chain) or "reset" in text or "closed" in text:
        return "the connection was cut"
    return f"the connection failed ({type(exc).__name__})"
