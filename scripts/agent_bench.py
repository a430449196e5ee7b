"""An agent's workload through `quickdraft serve`, side by side (issue 40): the main model alone, prompt
lookup, lookup with the draft model, the suffix index alone and in the default, and llama.cpp's
llama-server with its `ngram-mod` and `ngram-cache` drafters, all on the same requests.

    taskset -c 0 .venv/bin/python scripts/agent_bench.py -m MAIN.gguf -md DRAFT.gguf -t 1 \\
        [--llama-server PATH --lookup-create PATH] [--modes ...] --json agent.json
    ... --json agent.json --work DIR --resume      # a run cut short, finished later (DIR: printed at start)
    ... --modes main lookup+model default --before OLD_TREE   # this tree's default beside OLD_TREE's

The workload (`scripts/data/agent_workload.json`) runs in order: the same files rewritten across
sessions with small changes, tool-call loops over a small repository (`read_file`, `run_tests`, their
results scripted), and the same JSON shape extracted from different messages. Every server is up at
once (one slot each, greedy, the same threads and context); each request goes to the main model alone
first, whose answer continues the conversation (a tool call it makes gets its scripted result), then
to the others in turn, their order rotating, so each speedup is paired in time with the main model's.

What each side remembers is fed the same way: our servers start with an empty index (their own data
folders) and index what they answer; llama-server's ngram-mod keeps its pool for the server's life;
ngram-cache reads a static cache that `llama-lookup-create` builds, before each request, from the
text of every request and answer before it (llama-server saves no dynamic cache), so that server is
started again for each request with the cache of the history so far.

Per workload part and mode: the median paired speedup over the main model alone (generation
tokens/sec, the servers' own ``timings``), acceptance (accepted of drafted tokens), and tokens
accepted per drafting round (ours only: llama-server does not report its rounds). With ``llama-plain``
(llama-server without a drafter), llama.cpp's drafters are also given over llama.cpp's own decoding.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from ngram_bench import rotated, write_whole  # noqa: E402
from serve_vs_llama_server import wait_healthy  # noqa: E402

WORKLOAD = ROOT / "scripts/data/agent_workload.json"
MAX_TOKENS = {"rewrite": 320, "tools": 160, "extract": 160}
TOOL_TURNS = 5   # model turns per tool loop at most
OURS = {   # our modes: serve's flags beyond the shared ones
    "main": ["--drafter", "none", "--suffix-index", "off"],
    "lookup": ["--drafter", "lookup", "--suffix-index", "off"],
    "lookup+model": ["--draft", "{draft}", "--suffix-index", "off"],
    "suffix": ["--drafter", "suffix", "--suffix-index", "on"],
    "default": ["--draft", "{draft}", "--suffix-index", "on"],
}
THEIRS = ("llama-plain", "ngram-mod", "ngram-cache")   # llama-plain: llama-server decoding alone
BEFORE = "default-before"   # with --before: the default of another version's tree, paired with this one's


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workload = json.loads(Path(args.workload).read_text())
    if args.sessions:   # the first N sessions: a shorter run, still in the workload's order
        workload["sessions"] = workload["sessions"][:args.sessions]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="agent-bench-"))
    print(f"servers' data folders: {work} (--work {work} --resume goes on from here)", file=sys.stderr, flush=True)
    servers = Servers(args, work)
    requests: list[dict] = []
    answered = json.loads(Path(args.json).read_text())["requests"] if args.resume else []
    try:
        servers.start_all()
        drive(workload, servers.ask_all, lambda: save(args, requests, list(servers.modes)), requests, answered)
    finally:
        servers.stop_all()
    print(table(save(args, requests, list(servers.modes))))
    return 0


def save(args, requests: list[dict], modes: list[str]) -> dict:
    """The summary of the requests so far, written to ``--json`` (after every request: a run cut short
    keeps what it measured)."""
    summary = summarize(requests, modes)
    if args.json:
        write_whole(args.json, dict(settings=vars(args), requests=requests, summary=summary))
    return summary


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--main", required=True)
    p.add_argument("-md", "--draft", required=True)
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("-c", "--ctx", type=int, default=8192)
    p.add_argument("--workload", default=str(WORKLOAD))
    p.add_argument("--sessions", type=int, default=0, help="run only the first N sessions (0: all)")
    p.add_argument("--modes", nargs="+", default=[*OURS, *THEIRS], choices=[*OURS, *THEIRS])
    p.add_argument("--llama-server", help="llama-server built from the vendored sources (for ngram-mod, ngram-cache)")
    p.add_argument("--lookup-create", help="llama-lookup-create from the same build (for ngram-cache)")
    p.add_argument("--before", metavar="TREE",
                   help=f"another version's git tree (a worktree): its default joins the modes as {BEFORE}")
    p.add_argument("--profile", metavar="FILE",
                   help="a stored cost profile (`quickdraft calibrate` saves one under the data folder's "
                        "cache/profiles) that every quickdraft server starts from, instead of learning from cold")
    p.add_argument("--port", type=int, default=8300,
                   help="the first server's port, the others' after it (another run at once needs another range)")
    p.add_argument("--json")
    p.add_argument("--work", help="the servers' data folders (their indexes): a run's own, to --resume it")
    p.add_argument("--resume", action="store_true",
                   help="go on after the requests --json holds, with the indexes in --work: a run cut short "
                        "(a session's end) is finished by the next; llama-server's ngram-mod pool, in memory "
                        "only, starts empty again")
    args = p.parse_args(argv)
    if args.before and BEFORE not in args.modes:
        args.modes = [*args.modes, BEFORE]
    if args.resume and not (args.json and args.work):
        p.error("--resume needs the run's --json and its --work")
    if "main" not in args.modes:
        p.error("--modes must include main: its answers continue the conversations")
    if any(m in THEIRS for m in args.modes) and not args.llama_server:
        p.error(f"{', '.join(THEIRS)} need --llama-server")
    if "ngram-cache" in args.modes and not args.lookup_create:
        p.error("ngram-cache needs --lookup-create")
    return args


# --- the workload: conversations continued by the main model's own answers ------------------------


def drive(workload: dict, ask_all, done=None, requests: list[dict] | None = None,
          answered: list[dict] = ()) -> list[dict]:
    """Every request of the workload, in order, with each mode's answer: ``ask_all(messages, tools,
    max_tokens, history)`` -> {mode: answer}, the main model's first. ``history``: the text of every
    request and answer before this one (what ngram-cache is built from). ``done()`` is called after each
    request is answered and appended to ``requests``. ``answered``: a cut-short run's requests, taken as
    they were (the conversations go on from their main answers) and not asked again."""
    requests = [] if requests is None else requests
    history: list[str] = []
    for session in workload["sessions"]:
        fed = 0   # messages of this conversation already in the history
        for messages, tools in conversation(workload, session):
            if len(requests) < len(answered):
                answers = answered[len(requests)]["answers"]
            else:
                answers = ask_all(messages, tools, MAX_TOKENS[session["part"]], "\n".join(history))
            reference = answers["main"]
            requests.append(dict(session=session["id"], part=session["part"], answers=answers))
            if done is not None:
                done()
            messages.append(reference["message"])
            history.extend(message_text(m) for m in messages[fed:])
            fed = len(messages)
    return requests


def conversation(workload: dict, session: dict):
    """Yields (messages, tools) for each request of a session; the caller appends the main model's
    answer to ``messages`` before asking for the next, so a turn sees the answers before it."""
    messages = [{"role": "system", "content": workload["system"]}]
    if session["part"] == "extract":
        messages.append({"role": "user", "content": workload["extract_shape"] + session["text"]})
        yield messages, None
    elif session["part"] == "rewrite":
        source = workload["files"][session["file"]]
        for i, turn in enumerate(session["turns"]):
            content = f"{session['file']}:\n```python\n{source}```\n\n{turn}" if i == 0 else turn
            messages.append({"role": "user", "content": content})
            yield messages, None
    else:
        messages.append({"role": "user", "content": session["task"]})
        for _ in range(TOOL_TURNS):
            yield messages, workload["tools"]
            calls = messages[-1].get("tool_calls") or []
            if not calls:
                return
            messages.extend(tool_result(workload, call) for call in calls)


def tool_result(workload: dict, call: dict) -> dict:
    """The scripted result of a tool call: a file of the workload, or its test run's output."""
    name = call["function"]["name"]
    try:
        path = json.loads(call["function"]["arguments"]).get("path", "")
    except (json.JSONDecodeError, AttributeError):
        path = ""
    table = workload["files"] if name == "read_file" else workload["test_runs"] if name == "run_tests" else {}
    content = table.get(path) or f"error: {name} has nothing at {path!r}"
    return {"role": "tool", "tool_call_id": call.get("id", ""), "content": content}


def message_text(message: dict) -> str:
    calls = [json.dumps(c["function"]) for c in message.get("tool_calls") or []]
    return "\n".join([message.get("content") or "", *calls])


# --- the servers -----------------------------------------------------------------------------------


class Servers:
    """One server per mode, each on its own port; ngram-cache's is started for each request."""

    def __init__(self, args, work: Path):
        self.args, self.work = args, work
        work.mkdir(parents=True, exist_ok=True)   # --work names a folder that may not exist yet
        self.modes = {mode: args.port + i for i, mode in enumerate(args.modes)}
        self.processes: dict[str, subprocess.Popen] = {}
        self.turn = 0

    def command(self, mode: str) -> list[str]:
        a, port = self.args, str(self.modes[mode])
        if self.ours(mode):
            flags = [f.format(draft=a.draft) for f in OURS["default" if mode == BEFORE else mode]]
            return [sys.executable, "-m", "app.cli", "--data-dir", str(self.work / mode), "serve", "-m", a.main,
                    "-t", str(a.threads), "-c", str(a.ctx), "-np", "1", "--port", port, *flags]
        spec = [] if mode == "llama-plain" else ["--spec-type", mode]
        spec += ["-lcs", str(self.work / "history.lcs")] if mode == "ngram-cache" else []
        return [a.llama_server, "-m", a.main, "-t", str(a.threads), "-c", str(a.ctx), "-np", "1", "--port", port,
                "--host", "127.0.0.1", "--no-webui", "--jinja", *spec]

    def start(self, mode: str) -> None:
        if self.args.profile and self.ours(mode):
            self.seed_profile(mode)
        log = open(self.work / f"{mode}.log", "ab")
        tree = Path(self.args.before) if mode == BEFORE else ROOT   # `-m app.cli` runs the tree's own version
        self.processes[mode] = process = subprocess.Popen(self.command(mode), cwd=tree, stdout=log, stderr=log)
        wait_healthy(self.url(mode), process)

    @staticmethod
    def ours(mode: str) -> bool:
        """Whether ``mode`` is served by `quickdraft serve` (this tree's or --before's), not llama-server."""
        return mode in OURS or mode == BEFORE

    def seed_profile(self, mode: str) -> None:
        """--profile: the stored cost profile this quickdraft server starts from, where its data folder has
        none yet (a resumed run keeps what its servers learned). Each server learns the machine's costs
        from its own rounds' times, and from a cold start their noise sends them apart: on one run's
        rewrites lookup+model drafted 29 tokens in a turn it drafted 281 in another's."""
        profiles = self.work / mode / "cache" / "profiles"
        target = profiles / Path(self.args.profile).name
        if not target.exists():
            profiles.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.args.profile, target)

    def start_all(self) -> None:
        for mode in self.modes:
            if mode != "ngram-cache":
                self.start(mode)

    def stop(self, mode: str) -> None:
        process = self.processes.pop(mode, None)
        if process is not None:
            process.terminate()
            process.wait(60)

    def stop_all(self) -> None:
        for mode in list(self.processes):
            self.stop(mode)

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.modes[mode]}"

    def ask_all(self, messages: list[dict], tools, max_tokens: int, history: str) -> dict:
        others = [m for m in self.modes if m != "main"]
        turn, self.turn = self.turn, self.turn + 1
        answers = {"main": self.ask("main", messages, tools, max_tokens)}
        for mode in rotated(others, turn) if others else []:
            if mode == "ngram-cache":
                self.restart_with_history(history)
            answers[mode] = self.ask(mode, messages, tools, max_tokens)
            print(f"{len(messages):3} {mode:13} {answers[mode]['tps']:6.2f} t/s  drafted {answers[mode]['drafted']:4}"
                  f"  accepted {answers[mode]['accepted']:4}", file=sys.stderr, flush=True)
        return answers

    def restart_with_history(self, history: str) -> None:
        """ngram-cache's server, started again with a static cache of the history so far."""
        self.stop("ngram-cache")
        corpus = self.work / "history.txt"
        corpus.write_text(history or "\n")
        subprocess.run([self.args.lookup_create, "-m", self.args.main, "-f", str(corpus), "--no-escape", "-lcs",
                        str(self.work / "history.lcs"), "-t", str(self.args.threads)], check=True,
                       capture_output=True, timeout=1800)
        self.start("ngram-cache")

    def ask(self, mode: str, messages: list[dict], tools, max_tokens: int) -> dict:
        body = {"model": "main", "messages": messages, "max_tokens": max_tokens, "temperature": 0}
        if tools:
            body["tools"] = tools
        response = httpx.post(self.url(mode) + "/v1/chat/completions", json=body, timeout=1800)
        if response.status_code != 200:
            raise SystemExit(f"{mode} answered {response.status_code}: {response.text[:500]}")
        return answer_of(response.json())


def answer_of(body: dict) -> dict:
    message = body["choices"][0]["message"]
    t = body["timings"]
    kept = {k: message[k] for k in ("role", "content", "tool_calls") if message.get(k) is not None}
    return dict(message=kept, tps=t["predicted_per_second"], tokens=t["predicted_n"], drafted=t.get("draft_n", 0),
                accepted=t.get("draft_n_accepted", 0), rounds=t.get("drafting_rounds"), by_drafter=by_drafter(t))


def by_drafter(timings: dict) -> dict:
    """Each drafter's {drafted, accepted}, from our servers' ``draft_n_<drafter>`` timings (llama-server's
    have none: {})."""
    names = [k[len("draft_n_"):] for k in timings if k.startswith("draft_n_") and not k.startswith("draft_n_accepted")]
    return {name: dict(drafted=timings[f"draft_n_{name}"], accepted=timings.get(f"draft_n_accepted_{name}", 0))
            for name in names}


# --- the table -------------------------------------------------------------------------------------


def summarize(requests: list[dict], modes: list[str]) -> dict:
    """Per part and mode: median paired speedup over the main model alone, acceptance, accepted per
    drafting round (None where the server does not say), and how many answers were the main model's."""
    parts: dict = {}
    for part in dict.fromkeys(r["part"] for r in requests):
        rows = [r["answers"] for r in requests if r["part"] == part]
        parts[part] = {mode: cell([a[mode] for a in rows], [a["main"] for a in rows]) for mode in modes if mode != "main"}
        if "llama-plain" in modes:   # llama.cpp's drafters over llama.cpp's own plain decoding, too
            for mode in ("ngram-mod", "ngram-cache"):
                if mode in modes:
                    parts[part][mode]["over_own_plain"] = statistics.median(
                        a[mode]["tps"] / a["llama-plain"]["tps"] for a in rows if a["llama-plain"]["tps"] > 0)
    return dict(parts=parts, requests=len(requests))


def cell(answers: list[dict], mains: list[dict]) -> dict:
    drafted, accepted = sum(a["drafted"] for a in answers), sum(a["accepted"] for a in answers)
    rounds = [a["rounds"] for a in answers]
    return dict(speedup=statistics.median(a["tps"] / m["tps"] for a, m in zip(answers, mains) if m["tps"] > 0),
                acceptance=accepted / drafted if drafted else None, drafted=drafted,
                per_round=accepted / sum(rounds) if None not in rounds and sum(rounds) else None,
                same=sum(said(a["message"]) == said(m["message"]) for a, m in zip(answers, mains)), n=len(answers))


def said(message: dict) -> dict:
    """What an answer says: its text and its calls without their ids, which each server makes up anew
    (compared with them, every tool call read as a different answer)."""
    calls = [{k: v for k, v in c.items() if k != "id"} for c in message.get("tool_calls") or []]
    return {**message, "tool_calls": calls}


def table(summary: dict) -> str:
    modes = list(next(iter(summary["parts"].values())))
    lines = ["| part | " + " | ".join(modes) + " |", "|" + "---|" * (1 + len(modes))]
    for part, row in summary["parts"].items():
        lines.append(f"| {part} ({row[modes[0]]['n']} requests) | " + " | ".join(format_cell(row[m]) for m in modes) + " |")
    lines.append("\nEach cell: median paired speedup over the main model alone; accepted of drafted tokens; "
                 "accepted per drafting round; answers identical to the main model's.")
    return "\n".join(lines)


def format_cell(c: dict) -> str:
    accept = f"{c['acceptance']:.0%} of {c['drafted']}" if c["acceptance"] is not None else "nothing drafted"
    per_round = f", {c['per_round']:.1f}/round" if c["per_round"] is not None else ""
    own = f", {c['over_own_plain']:.2f}x over llama-server alone" if "over_own_plain" in c else ""
    return f"{c['speedup']:.2f}x ({accept}{per_round}; {c['same']}/{c['n']} same{own})"


if __name__ == "__main__":
    raise SystemExit(main())
