#!/usr/bin/env python3
"""An agent and an editor on one server at once (issue 39): an agent loop through the openai SDK (two
tools, five turns, the tools' results scripted) while an editor sends fill-in-the-middle requests to
/infill every few seconds, against `quickdraft serve --parallel N` and, with --llama-server, llama.cpp's
own server with -np N on the same files.

    python scripts/agent_fim_bench.py -m MAIN.gguf -md DRAFT.gguf -t 2 [--llama-server PATH] --json out.json

Per server: each agent turn's time and tokens, the loop's total, and each FIM request's time (sent
while the agent runs, non-streamed, as llama.vim and llama.vscode send them) with its median and
slowest. The agent's answers are greedy; the FIM requests are the editor's (greedy, 32 tokens at most).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

from parallel_bench import add_server_args, ours, peak_memory_mb, started, theirs   # a sibling: on the path

TURNS = 5
TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the repository's tests and return their output.",
        "parameters": {"type": "object", "properties": {}, "required": []}}},
]
CALC = "def mean(values):\n    return sum(values) / len(values) + 1\n\n\ndef median(values):\n    s = sorted(values)\n    return s[len(s) // 2]\n"
RESULTS = {"read_file": CALC,
           "run_tests": "FAILED test_calc.py::test_mean - assert 3.0 == 2.0\n1 failed, 1 passed in 0.02s"}
TASK = "The tests of calc.py fail. Find out why with the tools, then give the fixed calc.py."
FIM_PREFIX = "import json\n\n\ndef load_settings(path):\n    with open(path) as f:\n        "
FIM_SUFFIX = "\n    return settings\n\n\ndef save_settings(path, settings):\n    with open(path, \"w\") as f:\n        json.dump(settings, f)\n"


def main() -> int:
    args = parse_args()
    runs = {f"--parallel {args.parallel}": run_server(args, ours(args, args.parallel))}
    if args.llama_server:   # --jinja: llama-server reads tool calls only through the model's own template
        runs[f"llama-server -np {args.parallel}"] = run_server(args, theirs(args) + ["--jinja"])
    print(format_table(runs))
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "runs": runs}, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(p)
    p.add_argument("--turn-tokens", type=int, default=160, help="an agent turn's most tokens (160)")
    p.add_argument("--fim-every", type=float, default=3.0, help="seconds between the editor's requests (3)")
    return p.parse_args()


def run_server(args, command: list[str]) -> dict:
    with started(args, command) as (url, server):
        infill(url)   # warm-up
        done = threading.Event()
        fims: list[dict] = []
        editor = threading.Thread(target=edit_until, args=(url, args.fim_every, done, fims))
        editor.start()
        try:
            turns = agent_loop(url, args.turn_tokens)
        finally:
            done.set()
            editor.join()
        return {"turns": turns, "fim": fims, "server_peak_mb": peak_memory_mb(server.pid)}


def agent_loop(url: str, turn_tokens: int) -> list[dict]:
    """Five turns of the openai SDK's chat with the tools: a call gets its scripted result, an answer
    without one is followed by the user's "Go on." so that every run has five turns."""
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="none", timeout=1800)
    messages: list[dict] = [{"role": "user", "content": TASK}]
    turns = []
    for _ in range(TURNS):
        start = time.perf_counter()
        reply = client.chat.completions.create(model="local", messages=messages, tools=TOOLS, temperature=0,
                                               max_tokens=turn_tokens)
        message = reply.choices[0].message
        calls = message.tool_calls or []
        turns.append({"seconds": time.perf_counter() - start, "tokens": reply.usage.completion_tokens,
                      "tool_calls": [c.function.name for c in calls]})
        messages.append(message.model_dump(exclude_none=True))
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": RESULTS.get(call.function.name, "no such tool")})
        if not calls:
            messages.append({"role": "user", "content": "Go on."})
        print(f"  turn {len(turns)}: {turns[-1]['tokens']} tokens in {turns[-1]['seconds']:.1f} s, "
              f"calls {turns[-1]['tool_calls']}", file=sys.stderr, flush=True)
    return turns


def edit_until(url: str, every: float, done: threading.Event, out: list[dict]) -> None:
    while not done.is_set():
        out.append(infill(url))
        done.wait(every)


def infill(url: str) -> dict:
    start = time.perf_counter()
    r = httpx.post(url + "/infill", json={"input_prefix": FIM_PREFIX, "input_suffix": FIM_SUFFIX, "n_predict": 32,
                                          "temperature": 0, "cache_prompt": True}, timeout=1800)
    r.raise_for_status()
    return {"seconds": time.perf_counter() - start, "tokens": r.json().get("tokens_predicted")}


def format_table(runs: dict[str, dict]) -> str:
    lines = ["| server | agent: 5 turns (s) | agent tokens | FIM requests meanwhile | FIM median (s) | FIM slowest (s) |",
             "|---|---|---|---|---|---|"]
    for name, run in runs.items():
        fim = [f["seconds"] for f in run["fim"]]
        lines.append(f"| {name} | {sum(t['seconds'] for t in run['turns']):.1f} | "
                     f"{sum(t['tokens'] for t in run['turns'])} | {len(fim)} | "
                     f"{statistics.median(fim):.2f} | {max(fim):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
