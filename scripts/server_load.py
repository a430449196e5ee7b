"""Load and abuse benchmark for `quickdraft serve`: N concurrent clients of which a third misbehave.

Well-behaved clients stream a short chat answer again and again. The misbehaving third, by turns:
drops the connection after the first chunk, trickles its request headers a byte at a time, sends
a chunked body far over the size limit, sends complete headers and then its body a byte every 3 s,
or posts 20,000 valid tools. The script prints a table and writes JSON: requests served and
refused, answers by status or failure kind, p50/p99 latency of the well-behaved requests, and the
process's peak memory, peak open file descriptors and log growth (bytes written to stderr; this
process serves: the server runs in it, on its own threads). Run it under a file limit as a crowd
would meet it: ``ulimit -n 256``.

    .venv/bin/python scripts/server_load.py MAIN.gguf [-md DRAFT.gguf] [--clients 32] [--seconds 30]
        [--json out.json]

Without a model file, `--tiny` writes the test suite's tiny model and serves that.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.engine import Engine  # noqa: E402
from app.core.params import ModelParams, SpeculationParams  # noqa: E402
from app.server.run import LocalServer  # noqa: E402
from app.server.slots import ThreadedJobs  # noqa: E402

BODY = {"messages": [{"role": "user", "content": "Write one line about the sea."}], "max_tokens": 24,
        "temperature": 0, "stream": True}
MANY_TOOLS = json.dumps({**BODY, "stream": False, "tools": [
    {"type": "function", "function": {"name": f"tool_{i}", "description": "d", "parameters": {"type": "object"}}}
    for i in range(20_000)]}).encode()


def well_behaved(url: str, until: float, latencies: list[float], kinds: Counter) -> None:
    with httpx.Client(timeout=120) as client:
        while time.perf_counter() < until:
            started = time.perf_counter()
            try:
                response = _streamed(client, url)
                kinds[f"good {response.status_code}"] += 1
                if response.status_code == 200:
                    latencies.append(time.perf_counter() - started)
                else:
                    time.sleep(0.2)   # 429: the queue is full; back off a little as a client would
            except httpx.HTTPError as exc:
                kinds[f"good {type(exc).__name__}"] += 1


def _streamed(client: httpx.Client, url: str) -> httpx.Response:
    """One streamed answer read to its end. A keep-alive connection the server closed while it sat idle
    (its header deadline) is opened again once, as the openai SDK and browsers do. The close can meet the
    request on the wire two ways: the server shuts the socket before the request lands ("without sending
    a response") or after, and its kernel answers the request with a reset (a ReadError). Either way no
    response header came back, so the request never reached the application and sending it again repeats
    nothing. A failure after the headers is the server's and is counted."""
    try:
        return _stream_once(client, url)
    except _NoResponse:
        pass
    try:
        return _stream_once(client, url)
    except _NoResponse as again:
        raise again.__cause__


class _NoResponse(Exception):
    """The connection failed before any response header arrived."""


def _stream_once(client: httpx.Client, url: str) -> httpx.Response:
    context = client.stream("POST", url + "/v1/chat/completions", json=BODY)
    try:
        response = context.__enter__()
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        raise _NoResponse from exc
    try:
        for _ in response.iter_lines():
            pass
    finally:
        context.__exit__(None, None, None)
    return response


def dropper(url: str, until: float, kinds: Counter) -> None:
    """Leaves after the first chunk of its answer."""
    with httpx.Client(timeout=120) as client:
        while time.perf_counter() < until:
            try:
                with client.stream("POST", url + "/v1/chat/completions", json=BODY) as response:
                    next(response.iter_lines(), None)
                kinds[f"drop {response.status_code}"] += 1
            except httpx.HTTPError as exc:
                kinds[f"drop {type(exc).__name__}"] += 1
            time.sleep(0.1)


def trickler(host: str, port: int, until: float, kinds: Counter) -> None:
    """Sends its request line a byte every half second and never finishes its headers."""
    while time.perf_counter() < until:
        with socket.create_connection((host, port), timeout=5) as sock:
            for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 200:
                try:
                    sock.sendall(bytes([byte]))
                    sock.settimeout(0.5)
                    if sock.recv(1) == b"":
                        kinds["trickle closed by the server"] += 1
                        break
                except socket.timeout:
                    if time.perf_counter() > until:
                        kinds["trickle still open at the end"] += 1
                        return
                    continue
                except OSError:
                    kinds["trickle closed by the server"] += 1
                    break


def oversized(host: str, port: int, until: float, kinds: Counter) -> None:
    """Sends a chunked body far over the limit until the server answers."""
    chunk = b"x" * (1 << 20)
    while time.perf_counter() < until:
        reply = b""
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            sock.settimeout(0.05)
            for _ in range(256):
                try:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    reply = sock.recv(64)
                    if reply:
                        break
                except socket.timeout:
                    continue
                except OSError:
                    break
        kinds[f"oversized {_status(reply)}"] += 1
        time.sleep(0.2)


def slow_body(host: str, port: int, until: float, kinds: Counter) -> None:
    """Sends complete headers for a 1 MB body, then the body a byte every 3 s, until the server answers."""
    while time.perf_counter() < until:
        reply = b""
        try:
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 1000000\r\n\r\n")
                sock.settimeout(3)
                while not reply and time.perf_counter() < until:
                    sock.sendall(b" ")
                    try:
                        reply = sock.recv(64) or b"closed"
                    except socket.timeout:
                        continue
        except OSError:
            reply = b"closed"
        kinds[f"slow body {_status(reply) if reply else 'still open at the end'}"] += 1


def many_tools(url: str, until: float, kinds: Counter) -> None:
    """Posts 20,000 valid tools (2.6 MB): checking them once held the event loop for 24 s."""
    with httpx.Client(timeout=120) as client:
        while time.perf_counter() < until:
            try:
                response = client.post(url + "/v1/chat/completions", content=MANY_TOOLS,
                                       headers={"content-type": "application/json"})
                kinds[f"many tools {response.status_code}"] += 1
            except httpx.HTTPError as exc:
                kinds[f"many tools {type(exc).__name__}"] += 1
            time.sleep(0.2)


def _status(reply: bytes) -> str:
    return reply.split(b" ")[1].decode() if reply.startswith(b"HTTP") else "no answer"


class _Watch:
    """Peak open file descriptors (sampled) and the bytes written to stderr (fd 2, sent to a file)."""

    def __init__(self):
        self.peak_fds, self.done = 0, threading.Event()
        self.log = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.log.fileno(), 2)
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self.done.wait(0.2):
            self.peak_fds = max(self.peak_fds, len(os.listdir("/proc/self/fd")))

    def stop(self) -> int:
        """Restores stderr; the log's growth in bytes (its last lines go to stderr)."""
        self.done.set()
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        size = self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, size - 2000))
        sys.stderr.write(self.log.read().decode(errors="replace"))
        return size


def run(model: Path, draft: Path | None, clients: int, seconds: float) -> dict:
    def load():
        return Engine.load(ModelParams(str(model), n_ctx=2048),
                           ModelParams(str(draft), n_ctx=2048) if draft else None)

    watch = _Watch()
    jobs = ThreadedJobs(load, SpeculationParams(), max_waiting=8)
    jobs.start()
    server = LocalServer(jobs, "127.0.0.1", 0)
    server.start()
    url, kinds, latencies = server.url, Counter(), []
    until = time.perf_counter() + seconds
    bad = clients // 3
    misbehaving = [dropper, trickler, oversized, slow_body, many_tools]
    roles = [well_behaved] * (clients - bad) + [misbehaving[i % len(misbehaving)] for i in range(bad)]
    threads = []
    for role in roles:
        args = (url, until, latencies, kinds) if role is well_behaved else \
            (url, until, kinds) if role in (dropper, many_tools) else ("127.0.0.1", server.port, until, kinds)
        threads.append(threading.Thread(target=role, args=args, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    metrics_ok = httpx.get(url + "/metrics", timeout=10).status_code == 200
    health = httpx.get(url + "/health", timeout=10).status_code
    server.stop()
    jobs.stop()
    log_bytes = watch.stop()
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
    return {
        "clients": clients, "misbehaving": bad, "seconds": seconds,
        "served_well_behaved": len(latencies),
        "p50_s": statistics.median(latencies) if latencies else None, "p99_s": quantiles[98],
        "outcomes": dict(sorted((k, v) for k, v in kinds.items() if v)),
        "served": sum(v for k, v in kinds.items() if k.split()[-1].startswith("2")),
        "refused": sum(v for k, v in kinds.items() if k.split()[-1].startswith("4")),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_fds": watch.peak_fds, "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0], "log_bytes": log_bytes,
        "metrics_after": metrics_ok, "health_after": health,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?")
    parser.add_argument("-md", "--draft")
    parser.add_argument("--tiny", action="store_true", help="serve the test suite's tiny model")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.tiny or not args.model:
        from app.core.gguf.tiny import TinySpec, write_tiny_model

        model = write_tiny_model(Path(tempfile.mkdtemp()) / "tiny.gguf", TinySpec())
    else:
        model = Path(args.model)
    result = run(model, Path(args.draft) if args.draft else None, args.clients, args.seconds)
    print(f"{result['clients']} clients ({result['misbehaving']} misbehaving) for {result['seconds']:.0f} s "
          f"on {model.name}")
    print(f"well-behaved requests served: {result['served_well_behaved']}, "
          f"p50 {result['p50_s']:.2f} s, p99 {result['p99_s']:.2f} s" if result["p50_s"] else "none served")
    print(f"answers: {result['served']} served (2xx), {result['refused']} refused (4xx)")
    for kind, n in result["outcomes"].items():
        print(f"  {kind:<36} {n}")
    print(f"peak memory {result['peak_rss_mib']:.0f} MiB; peak open files {result['peak_fds']} of {result['fd_limit']}; "
          f"log growth {result['log_bytes']:,} bytes")
    print(f"/metrics after: {'ok' if result['metrics_after'] else 'FAILED'}; /health after: {result['health_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
