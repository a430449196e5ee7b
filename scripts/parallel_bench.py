#!/usr/bin/env python3
"""Several streaming clients at once against `quickdraft serve`: each client's time to first token and
total, with `--parallel N` slots and with one slot (the control), same pair, same machine, one run.

    python scripts/parallel_bench.py -m MAIN.gguf -md DRAFT.gguf --long 300 --short 16 --clients 4 \
        --parallel 4 [--llama-server PATH] --json out.json

The workload is issue 39's: one long answer and the others short, all sent at once (the long one a
moment first), greedily; with --llama-server, llama.cpp's own server runs it too with as many slots. Each server configuration is started on its own, warmed up, then the clients
go. The table gives per client the first token's and the last token's time from its request, and the
tokens it got; the JSON keeps every run.

With --scaling N, the workload is instead 1, 2, ... up to --clients clients at once, each asking for N
tokens (greedy, past the end of text) about a topic of its own, against --parallel slots (and
llama-server's -np): the tokens per second summed over the clients, and how they grow from one client.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from serve_vs_llama_server import wait_healthy   # a sibling script: this folder is on the path when run

ROOT = Path(__file__).resolve().parents[1]
LONG_PROMPT = "Write a detailed, step-by-step explanation of how a hash map works, with Python code."
SHORT_PROMPT = "Name one colour."
# one HTTP client for every request, made before any is timed: httpx.stream() makes a client per call,
# loading the CA certificates each time, and three clients started at once spent 0.2-0.4 s of a core
# on that before their requests went out, which read as the server's time to the first token
HTTP = httpx.Client(timeout=1800, limits=httpx.Limits(max_connections=64, max_keepalive_connections=0))


SCALING_TOPICS = ("hash maps", "binary search", "TCP handshakes", "garbage collection", "B-trees", "regular expressions",
                  "JSON parsing", "merge sort")


def main() -> int:
    args = parse_args()
    runs = {}
    if args.scaling:
        runs[f"--parallel {args.parallel}"] = run_server(args, ours(args, args.parallel), clients_growing)
        if args.llama_server:
            runs[f"llama-server -np {args.parallel}"] = run_server(args, theirs(args), clients_growing)
        print(format_scaling(runs))
    else:
        for parallel in dict.fromkeys([args.parallel, 1]):   # the slots asked for, then one slot: the control
            runs[f"--parallel {parallel}"] = run_server(args, ours(args, parallel), clients_at_once)
            if args.turns and parallel > 1:   # the same slots, each decoding alone: what decoding together gives
                runs[f"--parallel {parallel} -nocb"] = run_server(args, ours(args, parallel) + ["-nocb"], clients_at_once)
        if args.llama_server:   # the anchor: llama-server with as many slots, on the same files
            runs[f"llama-server -np {args.parallel}"] = run_server(args, theirs(args), clients_at_once)
        print(format_table(runs))
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "runs": runs}, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(p)
    p.add_argument("--clients", type=int, default=4, help="clients at once: one long, the others short (4)")
    p.add_argument("--long", type=int, default=300, help="the long answer's max tokens (300)")
    p.add_argument("--short", type=int, default=16, help="the short answers' max tokens (16)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="answers run to their max tokens (models with random weights end anywhere)")
    p.add_argument("--turns", action="store_true",
                   help="also run the slots taking turns, each decoding alone (serve --no-cont-batching)")
    p.add_argument("--scaling", type=int, metavar="N",
                   help="instead: 1 .. --clients equal clients at once, N tokens each; tokens/s summed over them")
    return p.parse_args()


def add_server_args(p: argparse.ArgumentParser) -> None:
    """The pair, the servers and their settings (this script's and agent_fim_bench.py's)."""
    p.add_argument("-m", "--main", required=True)
    p.add_argument("-md", "--draft")
    p.add_argument("--parallel", type=int, default=4, help="slots of the run measured (4)")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=4096)
    p.add_argument("-ngl", "--gpu-layers", default="auto", help="layers on the GPU (auto; 0: none; 99: all)")
    p.add_argument("--data-dir", help="our server's data folder (default: the user's)")
    p.add_argument("--port", type=int, help="the server's port (default: a free one)")
    p.add_argument("--llama-server", help="also run llama.cpp's llama-server (this binary) with -np --parallel, "
                   "drafting with the draft model, on the same files")
    p.add_argument("--json")


def ours(args, parallel: int) -> list[str]:
    return [sys.executable, "-m", "app.cli", *(["--data-dir", args.data_dir] if args.data_dir else []), "serve",
            "-m", args.main, *(["-md", args.draft, "-ngld", args.gpu_layers] if args.draft else []),
            "-ngl", args.gpu_layers, "-c", str(args.ctx), "-t", str(args.threads), "--parallel", str(parallel),
            "--state-cache-mb", "0", "--suffix-index", "off"]   # no history: each run answers as the first


def theirs(args) -> list[str]:
    layers = "99" if args.gpu_layers == "auto" else args.gpu_layers
    return [args.llama_server, "-m", args.main, *(["-md", args.draft, "-ngld", layers] if args.draft else []),
            "-ngl", layers, "-c", str(args.ctx), "-t", str(args.threads), "-np", str(args.parallel), "--no-webui"]


def run_server(args, command: list[str], workload) -> list[dict]:
    with started(args, command) as (url, server):
        stream(url, SHORT_PROMPT, 4, time.perf_counter(), args.ignore_eos)   # warm-up
        results = workload(url, args)
        peak = peak_memory_mb(server.pid)
        return [dict(r, server_peak_mb=peak) for r in results]


@contextmanager
def started(args, command: list[str]) -> Iterator[tuple[str, subprocess.Popen]]:
    """The server ``command`` starts, once healthy: (its URL, its process); stopped afterwards."""
    port = args.port or free_port()
    print(f"starting {' '.join(command[:4])} ... ({len(command)} arguments)", file=sys.stderr, flush=True)
    server = subprocess.Popen(command + ["--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL if command[0] == args.llama_server else sys.stderr)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, server)
        yield url, server
    finally:
        server.terminate()
        server.wait(60)


def clients_at_once(url: str, args) -> list[dict]:
    results: list[dict | None] = [None] * args.clients
    start = time.perf_counter()

    def client(i: int) -> None:
        prompt, n = (LONG_PROMPT, args.long) if i == 0 else (SHORT_PROMPT, args.short)
        results[i] = {"client": "long" if i == 0 else f"short {i}", **stream(url, prompt, n, start, args.ignore_eos)}

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for i, thread in enumerate(threads):
        thread.start()
        if i == 0:
            time.sleep(0.5)   # the long answer is asked first, as in the issue
    for thread in threads:
        thread.join()
    return results


def clients_growing(url: str, args) -> list[dict]:
    """1, 2, ... ``args.clients`` clients sent at once, each ``args.scaling`` tokens on its own topic: per
    count, the tokens summed over them per second of the whole (first request to last token)."""
    rows = []
    for n in range(1, args.clients + 1):
        results: list[dict | None] = [None] * n
        start = time.perf_counter()

        def client(i: int) -> None:
            prompt = f"Explain {SCALING_TOPICS[i % len(SCALING_TOPICS)]} in detail, with Python code."
            results[i] = stream(url, prompt, args.scaling, start, ignore_eos=True)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = max(r["total_s"] for r in results)
        tokens = sum(r["tokens"] for r in results)
        firsts = sorted(r["first_token_s"] for r in results if r["first_token_s"] is not None)
        rows.append({"clients": n, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                     "first_token_s": firsts[len(firsts) // 2] if firsts else None, "each": results})
        print(f"  {n} at once: {tokens} tokens in {wall:.1f} s, {tokens / wall:.1f} t/s", file=sys.stderr, flush=True)
    return rows


def stream(url: str, prompt: str, n: int, start: float, ignore_eos: bool = False) -> dict:
    """One streamed chat answer: seconds from ``start`` to the first content and to the end, tokens, and the
    server's timings of it (its closing chunk's: prompt and decoding time, drafted and accepted)."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": ignore_eos}
    first = None
    tokens = 0
    timings = None
    with HTTP.stream("POST", url + "/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content") is not None:
                first = time.perf_counter() - start
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            timings = chunk.get("timings") or timings
    return {"first_token_s": first, "total_s": time.perf_counter() - start, "tokens": tokens, "timings": timings}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_memory_mb(pid: int) -> float | None:
    """The server's peak resident memory (Linux's VmHWM), in MB; None elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def format_table(runs: dict[str, list[dict]]) -> str:
    lines = ["| server | client | tokens | first token (s) | total (s) | server: prompt read, decoding (ms) "
             "| accepted of drafted | server's peak memory (MB) |", "|---|---|---|---|---|---|---|---|"]
    for name, results in runs.items():
        for r in results:
            first = f"{r['first_token_s']:.2f}" if r["first_token_s"] is not None else "-"
            peak = f"{r['server_peak_mb']:.0f}" if r.get("server_peak_mb") is not None else "-"
            t = r.get("timings") or {}
            server = f"{t['prompt_ms']:.0f}, {t['predicted_ms']:.0f}" if "predicted_ms" in t else "-"
            drafts = f"{t['draft_n_accepted']} of {t['draft_n']}" if "draft_n" in t else "-"
            lines.append(f"| {name} | {r['client']} | {r['tokens']} | {first} | {r['total_s']:.2f} | {server} "
                         f"| {drafts} | {peak} |")
    return "\n".join(lines)


def format_scaling(runs: dict[str, list[dict]]) -> str:
    lines = ["| server | clients at once | tokens | tokens/s summed | against one client | median first token (s) |",
             "|---|---|---|---|---|---|"]
    for name, rows in runs.items():
        for r in rows:
            first = f"{r['first_token_s']:.1f}" if r["first_token_s"] is not None else "-"
            lines.append(f"| {name} | {r['clients']} | {r['tokens']} | {r['tokens_per_s']:.1f} | "
                         f"{r['tokens_per_s'] / rows[0]['tokens_per_s']:.2f}x | {first} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
