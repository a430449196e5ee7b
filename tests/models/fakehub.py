"""A local stand-in for the part of the Hugging Face Hub API that huggingface_hub uses here.

Serves model search (/api/models), repository info with file metadata (/api/models/<id>/revision/<rev>),
and file downloads (/<id>/resolve/<rev>/<file>) with Range support; it records every request and can
misbehave on purpose: cut a download mid-file, stall it until released, lie about a SHA-256, be slow.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    downloads: int = 0
    likes: int = 0
    card: str | None = None
    gated: bool = False


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    cut_after: dict[str, int] = field(default_factory=dict)    # file -> bytes sent before the first GET drops
    stall_after: dict[str, int] = field(default_factory=dict)  # file -> bytes sent before waiting for `release`
    cut_every_get: bool = False                                # cut_after applies to every GET, not the first
    wrong_sha: set[str] = field(default_factory=set)
    chunk_delay_s: float = 0.0
    chunk_size: int = 16 * 1024
    release: threading.Event = field(default_factory=threading.Event)
    token: str | None = None                                    # required for gated repos
    url: str = ""

    def file_requests(self, filename: str) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.path.endswith("/" + filename)]

    def sha256(self, filename: str, data: bytes) -> str:
        if filename in self.wrong_sha:
            return hashlib.sha256(data + b"tampered").hexdigest()
        return hashlib.sha256(data).hexdigest()


def start_fake_hub(hub: FakeHub) -> tuple[ThreadingHTTPServer, threading.Thread]:
    handler = type("Handler", (_Handler,), {"hub": hub})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-hub", daemon=True)
    thread.start()
    return server, thread


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.0"

    def log_message(self, format, *args):  # keep test output clean
        pass

    def do_GET(self):
        self._record()
        self._route(head=False)

    def do_HEAD(self):
        self._record()
        self._route(head=True)

    def _record(self):
        self.hub.requests.append(Request(self.command, urlparse(self.path).path, dict(self.headers.items())))

    def _route(self, head: bool):
        url = urlparse(self.path)
        path = unquote(url.path)
        if path == "/api/models":
            return self._search(parse_qs(url.query))
        if path.startswith("/api/models/") and "/revision/" in path:
            repo_id = path[len("/api/models/"):].split("/revision/")[0]
            return self._info(repo_id)
        if "/resolve/" in path:
            repo_id, rest = path.lstrip("/").split("/resolve/", 1)
            filename = rest.split("/", 1)[1]
            return self._file(repo_id, filename, head)
        self._json({"error": "not found"}, 404)

    def _search(self, query: dict[str, list[str]]):
        text = query.get("search", [""])[0].lower()
        if query.get("filter") != ["gguf"] or query.get("sort") != ["downloads"]:
            return self._json({"error": f"unexpected query {query}"}, 400)
        found = [(rid, r) for rid, r in self.hub.repos.items() if text in rid.lower()]
        found.sort(key=lambda item: -item[1].downloads)
        self._json([{"id": rid, "modelId": rid, "downloads": r.downloads, "likes": r.likes, "gated": r.gated,
                     "tags": ["gguf"], "lastModified": "2025-01-02T03:04:05.000Z"} for rid, r in found])

    def _repo(self, repo_id: str) -> FakeRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if repo.gated and self.headers.get("authorization") != f"Bearer {self.hub.token}":
            self._error(401, "GatedRepo", "Access to model is restricted.")
            return None
        return repo

    def _info(self, repo_id: str):
        repo = self._repo(repo_id)
        if repo is None:
            return
        siblings = [{"rfilename": name, "size": len(data), "blobId": hashlib.sha1(data).hexdigest(),
                     "lfs": {"size": len(data), "sha256": self.hub.sha256(name, data), "pointerSize": 134}}
                    for name, data in repo.files.items()]
        if repo.card is not None:
            siblings.append({"rfilename": "README.md", "size": len(repo.card), "blobId": "0" * 40})
        self._json({"id": repo_id, "modelId": repo_id, "sha": "a" * 40, "siblings": siblings,
                    "downloads": repo.downloads, "likes": repo.likes, "tags": ["gguf"]})

    def _file(self, repo_id: str, filename: str, head: bool):
        repo = self._repo(repo_id)
        if repo is None:
            return
        data = repo.files.get(filename)
        if filename == "README.md" and repo.card is not None:
            data = repo.card.encode()
        if data is None:
            return self._error(404, "EntryNotFound", "Entry not found")
        start = 0
        range_header = self.headers.get("Range")
        if range_header:
            start = int(range_header.removeprefix("bytes=").split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.end_headers()
        if not head:
            self._send_body(filename, data, start)

    def _send_body(self, filename: str, data: bytes, start: int):
        first_get = len(self.hub.file_requests(filename)) == 1
        cut = self.hub.cut_after.get(filename) if first_get or self.hub.cut_every_get else None
        stall = self.hub.stall_after.get(filename) if first_get else None
        pos = start
        while pos < len(data):
            if cut is not None and pos >= cut:
                self.wfile.flush()
                self.connection.shutdown(2)   # drop the connection mid-file
                self.close_connection = True
                return
            if stall is not None and pos >= stall:
                self.hub.release.wait(10)
                stall = None
            end = min(len(data), pos + self.hub.chunk_size)
            if cut is not None:
                end = min(end, cut)
            if stall is not None:
                end = min(end, stall) if pos < stall else end
            try:
                self.wfile.write(data[pos:end])
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return
            pos = end
            if self.hub.chunk_delay_s:
                time.sleep(self.hub.chunk_delay_s)

    def _json(self, payload, status: int = 200):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, code: str, message: str):
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


TINY_REPO = "test-org/Tiny-Chat-GGUF"
OTHER_REPO = "test-org/Tiny-Other-GGUF"
SPLIT_REPO = "test-org/Tiny-Split-GGUF"
GATED_REPO = "test-org/Tiny-Gated-GGUF"
MAIN_FILE = "tiny-chat-F32.gguf"
DRAFT_FILE = "tiny-chat-draft-Q8_0.gguf"
OTHER_FILE = "tiny-other-F32.gguf"
TINY_CARD = """---
license: mit
tags: [gguf]
---

# Tiny Chat

A tiny llama-architecture model for **tests**: it loads in milliseconds.

It has a byte-level vocabulary.

| table | ignored |
"""


def tiny_bytes(tmp_dir, file_name: str, **spec) -> bytes:
    from app.core.gguf.tiny import TinySpec, write_tiny_model

    return write_tiny_model(tmp_dir / file_name, TinySpec(**spec)).read_bytes()


def populated_hub(tmp_dir) -> FakeHub:
    """Four repositories of tiny GGUF models: a pair, another vocabulary, a split file, a gated one."""
    main = tiny_bytes(tmp_dir, "main.gguf", seed=0, n_layer=4, name="Tiny Chat 2M")
    draft = tiny_bytes(tmp_dir, "draft.gguf", seed=1, name="Tiny Chat 1M")
    other = tiny_bytes(tmp_dir, "other.gguf", seed=2, other_vocab=True, name="Other")
    return FakeHub(repos={
        TINY_REPO: FakeRepo({MAIN_FILE: main, DRAFT_FILE: draft, "mmproj-tiny-F16.gguf": draft}, downloads=500,
                            likes=7, card=TINY_CARD),
        OTHER_REPO: FakeRepo({OTHER_FILE: other}, downloads=900),
        SPLIT_REPO: FakeRepo({"tiny-Q4_K_M-00001-of-00002.gguf": main, "tiny-Q4_K_M-00002-of-00002.gguf": other},
                             downloads=10),
        GATED_REPO: FakeRepo({MAIN_FILE: main}, downloads=1, gated=True),
    })


def serve_for_a_test(tmp_dir, monkeypatch) -> Iterator[FakeHub]:
    """A populated fake hub on 127.0.0.1 for one test (a fixture's body: ``yield from``): no proxy in
    the way, quick retries; stopped, with any stalled download released, afterwards."""
    from app.models.download import transfer

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setattr(transfer, "RETRY_DELAY_S", 0.05)
    hub = populated_hub(tmp_dir)
    server, thread = start_fake_hub(hub)
    yield hub
    hub.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)
