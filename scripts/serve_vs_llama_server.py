#!/usr/bin/env python3
"""Our server's tokens/sec against llama-server's, same pair, same prompts, same machine, one run.

    python scripts/serve_vs_llama_server.py --llama-server PATH -m MAIN.gguf -md DRAFT.gguf \
        --prompts ../shared/prompts/code.jsonl --limit 3 -n 128 --json out.json

Both servers are up at once with the same threads, context and drafting (the draft model's chain of
--draft-max tokens per round), each answers a warm-up request, then they take turns on each prompt,
greedily, so a busy machine slows both alike. The numbers are the servers' own ``timings``
(generation tokens/sec after the first token, draft counts) plus the client's wall time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.cli.bench import load_prompts  # noqa: E402

PORTS = {"quickdraft": 8093, "llama-server": 8094}


def main() -> int:
    args = parse_args()
    prompts = load_prompts(args.prompts)[: args.limit]
    processes = {name: start(name, command) for name, command in servers(args).items()}
    try:
        results = take_turns(prompts, args.n_predict)
    finally:
        for process in processes.values():
            process.terminate()
            process.wait(30)
    rows = table_rows(prompts, results)
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "rows": rows, "raw": results}, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-server", required=True, help="the llama-server binary")
    p.add_argument("-m", "--main", required=True)
    p.add_argument("-md", "--draft", required=True)
    p.add_argument("--prompts", nargs="+", required=True)
    p.add_argument("--limit", type=int, default=3)
    p.add_argument("-n", "--n-predict", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=4096)
    p.add_argument("--draft-max", type=int, default=3,
                   help="tokens drafted per round by both servers (3, llama-server's default)")
    p.add_argument("--json")
    return p.parse_args()


def servers(args) -> dict[str, list[str]]:
    common = ["-m", args.main, "-md", args.draft, "-c", str(args.ctx), "-t", str(args.threads)]
    n = str(args.draft_max)
    return {
        "quickdraft": [sys.executable, "-m", "app.cli", "serve", *common, "--port", str(PORTS["quickdraft"]),
                       "--queue", "0", "--drafter", "model", "--policy", "fixed", "--draft-max", n,
                       "--suffix-index", "off"],
        "llama-server": [args.llama_server, *common, "--port", str(PORTS["llama-server"]), "-td", str(args.threads),
                         "-np", "1", "--host", "127.0.0.1", "--spec-type", "draft-simple", "--spec-draft-n-max", n,
                         "--no-webui"],
    }


def start(name: str, command: list[str]) -> subprocess.Popen:
    print(f"starting {name} ...", file=sys.stderr, flush=True)
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def take_turns(prompts, n_predict: int) -> dict[str, list[dict]]:
    models = {}
    for name, port in PORTS.items():
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url)
        models[name] = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        ask(url, models[name], [{"role": "user", "content": "Say hello."}], 8)  # warm-up
    results: dict[str, list[dict]] = {name: [] for name in PORTS}
    for prompt_id, messages in prompts:
        for name, port in PORTS.items():
            answer = ask(f"http://127.0.0.1:{port}", models[name], messages, n_predict) | {"prompt": prompt_id}
            print(f"{name} {prompt_id}: {answer['tps']:.2f} t/s", file=sys.stderr, flush=True)
            results[name].append(answer)
    return results


def wait_healthy(url: str, server: subprocess.Popen | None = None, timeout: float = 900) -> None:
    """Until ``url``'s /health answers 200; stops the run when ``server`` (its process) exits first."""
    start = time.time()
    while time.time() - start < timeout:
        if server is not None and server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode} before it was healthy")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server did not become healthy")


def ask(url: str, model: str, messages: list[dict], n: int) -> dict:
    body = {"model": model, "messages": messages, "max_tokens": n, "temperature": 0}
    start = time.perf_counter()
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
    response.raise_for_status()
    return summarize(response.json(), time.perf_counter() - start)


def summarize(answer: dict, wall: float) -> dict:
    t = answer["timings"]
    return {"tps": t["predicted_per_second"], "predicted_n": t["predicted_n"], "draft_n": t.get("draft_n", 0),
            "draft_n_accepted": t.get("draft_n_accepted", 0), "prompt_ms": t["prompt_ms"], "wall_s": wall,
            "text": answer["choices"][0]["message"]["content"]}


def table_rows(prompts, results: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for i, (prompt_id, _) in enumerate(prompts):
        ours, theirs = results["quickdraft"][i], results["llama-server"][i]
        rows.append({"prompt": prompt_id, "quickdraft_tps": ours["tps"], "llama_server_tps": theirs["tps"],
                     "ratio": ours["tps"] / theirs["tps"] if theirs["tps"] else 0.0,
                     "quickdraft_accept": rate(ours), "llama_server_accept": rate(theirs),
                     "quickdraft_n": ours["predicted_n"], "llama_server_n": theirs["predicted_n"],
                     "same_text": ours["text"] == theirs["text"]})
    return rows


def rate(answer: dict) -> float:
    return answer["draft_n_accepted"] / answer["draft_n"] if answer["draft_n"] else 0.0


def format_table(rows: list[dict]) -> str:
    head = f"{'prompt':<10} {'quickdraft t/s':>14} {'llama-server t/s':>16} {'ratio':>6} {'accept qd':>9} " \
           f"{'accept ls':>9} {'tokens qd/ls':>12} {'same text':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['prompt']:<10} {r['quickdraft_tps']:14.2f} {r['llama_server_tps']:16.2f} {r['ratio']:6.2f} "
                     f"{100 * r['quickdraft_accept']:8.0f}% {100 * r['llama_server_accept']:8.0f}% "
                     f"{r['quickdraft_n']:>5}/{r['llama_server_n']:<6} {str(r['same_text']):>9}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
