"""`quickdraft serve` and `quickdraft generate --remote` as a user runs them, in subprocesses."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def command(*args: str, tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "app.cli", "--data-dir", str(tmp_path / "data"), *args]


def run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args, tmp_path=tmp_path), capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_serve_then_generate_remote_with_its_speculation(tiny_models, tmp_path):
    serve = subprocess.Popen(command("serve", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "--port", "0",
                                     "-c", "512", "--drafter", "model", "--policy", "fixed", "--draft-max", "4",
                                     tmp_path=tmp_path), stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        banner = next(line for line in serve.stderr if line.startswith("serving ") or "error" in line)
        url = re.search(r"at (http://\S+)/v1", banner)
        assert url, banner
        assert "4 at once, their verify batches decoded together)" in banner   # a keys-and-values main model
        assert "context 512 a slot" in banner   # --parallel unset: each slot may hold the whole context
        r = run("generate", "--remote", url[1], "-p", "the cat", "-n", "24", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip()
        assert "n_predict = 24" in r.stderr and "accept    = 100.000%" in r.stderr
    finally:
        serve.send_signal(signal.SIGINT)
        _, err = serve.communicate(timeout=20)
    assert serve.returncode == 0 and "Traceback" not in err


@pytest.mark.parametrize("flags, per_slot, slots", [
    ([], 4096, 4), (["-np", "2"], 2048, 2), (["-np", "3"], 1536, 3), (["-np", "2", "-kvu"], 4096, 2),
    (["--no-kv-unified"], 1024, 4), (["-np", "16", "-c", "1024"], 256, 16),
])
def test_given_slots_divide_the_context_as_llama_servers_do(flags, per_slot, slots):
    from app.cli.commands import build_parser
    from app.server.cli import divide_context

    args = build_parser().parse_args(["serve", "-m", "x.gguf", "-c", "4096", "-cd", "2048", *flags])
    divide_context(args)
    assert (args.ctx, args.parallel) == (per_slot, slots)
    assert args.ctx_draft == (2048 if per_slot == 4096 else max(256, -(-(2048 // slots) // 256) * 256))


def test_a_served_slot_holds_its_share_of_the_context(tiny_models, tmp_path):
    serve = subprocess.Popen(command("serve", "-m", str(tiny_models.main), "--port", "0", "-c", "1024", "-np", "2",
                                     tmp_path=tmp_path), stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        banner = next(line for line in serve.stderr if line.startswith("serving ") or "error" in line)
        assert "context 512 a slot, 2 at once" in banner, banner
        url = re.search(r"at (http://\S+)/v1", banner)[1]
        import httpx
        assert [slot["n_ctx"] for slot in httpx.get(url + "/slots", timeout=10).json()] == [512, 512]
        r = httpx.post(url + "/completion", json={"prompt": "the cat " * 300, "n_predict": 1}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["n_ctx"] == 512
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=20)


@pytest.mark.parametrize("case", ["exposed", "taken port", "missing model", "neither", "both", "no slot", "no batch",
                                  "no slot save folder"])
def test_serve_and_remote_user_errors_are_one_line(tiny_models, tmp_path, case):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    args = {
        "exposed": ["serve", "-m", str(tiny_models.main), "--host", "0.0.0.0"],
        "taken port": ["serve", "-m", str(tiny_models.main), "--port", str(taken.getsockname()[1])],
        "missing model": ["serve", "-m", str(tmp_path / "none.gguf")],
        "neither": ["generate", "-p", "hi"],
        "both": ["generate", "-m", str(tiny_models.main), "--remote", "http://127.0.0.1:9", "-p", "hi"],
        "no slot": ["serve", "-m", str(tiny_models.main), "--parallel", "0"],
        "no batch": ["serve", "-m", str(tiny_models.main), "-b", "0"],
        "no slot save folder": ["serve", "-m", str(tiny_models.main), "--slot-save-path", str(tmp_path / "none")],
    }[case]
    r = run(*args, tmp_path=tmp_path)
    taken.close()
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_generate_remote_on_a_dead_server_is_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run("generate", "--remote", f"http://127.0.0.1:{port}", "-p", "hi", tmp_path=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error: cannot reach") and "Traceback" not in r.stderr


class _SilentServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that streams an answer and says nothing about drafting."""

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, "application/json", json.dumps({"data": [{"id": "big-model"}]}))
        else:
            self._send(404, "text/plain", "Not Found")

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        chunks = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in ("Hello", " there")]
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self._send(200, "text/event-stream", "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n")

    def _send(self, status: int, kind: str, body: str):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_generate_remote_says_when_the_server_reports_no_speculation(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SilentServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        r = run("generate", "--remote", f"http://127.0.0.1:{server.server_address[1]}", "-p", "hi", tmp_path=tmp_path)
    finally:
        server.shutdown()
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Hello there"
    assert "speculation: not reported by the server" in r.stderr and "n_drafted" not in r.stderr
