"""scripts/agent_bench.py drives the agent workload: conversations continued by the main model's own
answers, tool calls answered from the workload's scripted repository, and a paired table per part."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from agent_bench import WORKLOAD, drive, summarize, table  # noqa: E402


def answer(message: dict, tps: float = 10.0, drafted: int = 0, accepted: int = 0, rounds=None) -> dict:
    return dict(message=message, tps=tps, tokens=8, drafted=drafted, accepted=accepted, rounds=rounds)


def call(name: str, path: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps({"path": path})}}


def test_the_workload_names_only_files_and_tools_it_has():
    workload = json.loads(WORKLOAD.read_text())
    declared = {t["function"]["name"] for t in workload["tools"]}
    assert declared == {"read_file", "run_tests"}
    parts = {s["part"] for s in workload["sessions"]}
    assert parts == {"rewrite", "tools", "extract"}
    assert all(s["file"] in workload["files"] for s in workload["sessions"] if s["part"] == "rewrite")
    assert set(workload["test_runs"]) <= set(workload["files"])
    rewritten = [s["file"] for s in workload["sessions"] if s["part"] == "rewrite"]
    assert len(rewritten) > len(set(rewritten))   # a file is rewritten again in a later session


def test_a_tool_loop_is_continued_with_the_main_models_calls_and_their_scripted_results():
    workload = {"system": "sys", "files": {"a.py": "print(1)\n"}, "test_runs": {}, "tools": [{"t": 1}],
                "extract_shape": "", "sessions": [{"id": "tools-1", "part": "tools", "task": "look at a.py"}]}
    seen = []

    def ask_all(messages, tools, max_tokens, history):
        seen.append(([dict(m) for m in messages], tools, history))
        if len(seen) == 1:
            message = {"role": "assistant", "tool_calls": [call("read_file", "a.py"), call("run_tests", "b.py")]}
        else:
            message = {"role": "assistant", "content": "done"}
        return {"main": answer(message), "lookup": answer(message, tps=15.0, drafted=4, accepted=3, rounds=2)}

    requests = drive(workload, ask_all)
    assert len(requests) == 2 and seen[0][1] == [{"t": 1}]
    second = seen[1][0]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert second[3]["content"] == "print(1)\n" and "nothing at 'b.py'" in second[4]["content"]
    assert seen[0][2] == "" and "look at a.py" in seen[1][2] and "read_file" in seen[1][2]   # the history so far
    cell = summarize(requests, ["main", "lookup"])["parts"]["tools"]["lookup"]
    assert cell["speedup"] == 1.5 and cell["acceptance"] == 0.75 and cell["per_round"] == 1.5 and cell["same"] == 2
    assert "1.50x (75% of 8, 1.5/round; 2/2 same)" in table(summarize(requests, ["main", "lookup"]))


def test_answers_that_differ_only_in_their_call_ids_are_the_same_answer():
    first = {"role": "assistant", "tool_calls": [call("run_tests", "t.py")]}
    second = {"role": "assistant", "tool_calls": [dict(call("run_tests", "t.py"), id="c2")]}
    other = {"role": "assistant", "tool_calls": [dict(call("run_tests", "u.py"), id="c3")]}
    requests = [dict(session="tools-1", part="tools", answers={"main": answer(first), "lookup": answer(second),
                                                               "suffix": answer(other)})]
    cells = summarize(requests, ["main", "lookup", "suffix"])["parts"]["tools"]
    assert cells["lookup"]["same"] == 1 and cells["suffix"]["same"] == 0


def test_a_rewrite_session_sends_the_file_once_and_then_only_the_next_instruction():
    workload = {"system": "sys", "files": {"a.py": "x = 1\n"}, "test_runs": {}, "tools": [], "extract_shape": "",
                "sessions": [{"id": "rewrite-1", "part": "rewrite", "file": "a.py", "turns": ["one", "two"]}]}
    sent = []

    def ask_all(messages, tools, max_tokens, history):
        sent.append([m["content"] for m in messages])
        return {"main": answer({"role": "assistant", "content": f"answer {len(sent)}"})}

    saved = []
    requests = drive(workload, ask_all, lambda: saved.append(len(requests)), requests := [])
    assert saved == [1, 2] and len(requests) == 2   # told after each request, with it appended
    assert "x = 1" in sent[0][1] and sent[0][1].endswith("one")
    assert sent[1][2:] == ["answer 1", "two"]


def test_llama_cpps_drafters_are_also_given_over_llama_servers_own_decoding():
    requests = [dict(session="s", part="rewrite", answers={
        "main": answer({"role": "assistant", "content": "x"}, tps=10.0),
        "llama-plain": answer({"role": "assistant", "content": "x"}, tps=12.0),
        "ngram-mod": answer({"role": "assistant", "content": "x"}, tps=15.0, drafted=10, accepted=5)})]
    summary = summarize(requests, ["main", "llama-plain", "ngram-mod"])
    cell = summary["parts"]["rewrite"]["ngram-mod"]
    assert cell["speedup"] == 1.5 and cell["over_own_plain"] == 1.25
    assert "1.25x over llama-server alone" in table(summary)
    assert "over_own_plain" not in summary["parts"]["rewrite"]["llama-plain"]


def test_a_resumed_run_takes_the_answered_requests_as_they_were_and_asks_the_rest():
    workload = {"system": "sys", "files": {"a.py": "x = 1\n"}, "test_runs": {}, "tools": [], "extract_shape": "",
                "sessions": [{"id": "rewrite-1", "part": "rewrite", "file": "a.py", "turns": ["one", "two", "three"]}]}
    first = drive(workload, lambda m, t, n, h: {"main": answer({"role": "assistant", "content": f"answer {len(m)}"})})
    asked = []

    def ask_all(messages, tools, max_tokens, history):
        asked.append([m["content"] for m in messages])
        return {"main": answer({"role": "assistant", "content": "fresh"})}

    resumed = drive(workload, ask_all, answered=first[:2])
    assert len(asked) == 1 and resumed[:2] == first[:2]
    assert asked[0][2:] == ["answer 2", "two", "answer 4", "three"]   # the conversation went on from the run's answers


def test_another_trees_default_runs_from_that_tree_with_the_defaults_flags(tmp_path, monkeypatch):
    import agent_bench

    args = agent_bench.parse_args(["-m", "main.gguf", "-md", "draft.gguf", "--modes", "main", "default",
                                   "--before", str(tmp_path)])
    assert args.modes == ["main", "default", agent_bench.BEFORE]
    servers = agent_bench.Servers(args, tmp_path / "work")
    before, ours = servers.command(agent_bench.BEFORE), servers.command("default")
    assert before[before.index("--port") + 1] != ours[ours.index("--port") + 1]
    assert before[before.index("--port") + 2:] == ours[ours.index("--port") + 2:] == \
        ["--draft", "draft.gguf", "--suffix-index", "on"]
    assert str(tmp_path / "work" / agent_bench.BEFORE) in before   # a data folder (an index) of its own
    started = []
    monkeypatch.setattr(agent_bench.subprocess, "Popen", lambda command, cwd, stdout, stderr: started.append(cwd))
    monkeypatch.setattr(agent_bench, "wait_healthy", lambda url, process: None)
    servers.start(agent_bench.BEFORE)
    servers.start("default")
    assert started == [tmp_path, agent_bench.ROOT]


def test_every_quickdraft_server_starts_from_the_profile_given_and_keeps_what_it_learned(tmp_path, monkeypatch):
    import agent_bench

    profile = tmp_path / "profile-abc.json"
    profile.write_text('{"main_batch_s": [0.05]}')
    args = agent_bench.parse_args(["-m", "main.gguf", "-md", "draft.gguf", "--modes", "main", "lookup+model",
                                   "default", "--profile", str(profile)])
    servers = agent_bench.Servers(args, tmp_path / "work")
    monkeypatch.setattr(agent_bench.subprocess, "Popen", lambda command, cwd, stdout, stderr: None)
    monkeypatch.setattr(agent_bench, "wait_healthy", lambda url, process: None)
    learned = tmp_path / "work" / "lookup+model" / "cache" / "profiles" / "profile-abc.json"
    learned.parent.mkdir(parents=True)
    learned.write_text('{"main_batch_s": [0.07]}')            # a resumed run's server learned this
    for mode in args.modes:
        servers.start(mode)
    for mode in ("main", "default"):
        assert (tmp_path / "work" / mode / "cache" / "profiles" / "profile-abc.json").read_text() == profile.read_text()
    assert learned.read_text() == '{"main_batch_s": [0.07]}'


def test_each_drafters_counts_are_kept_from_our_servers_timings():
    from agent_bench import answer_of

    body = {"choices": [{"message": {"role": "assistant", "content": "x"}}],
            "timings": {"predicted_per_second": 20.0, "predicted_n": 9, "draft_n": 7, "draft_n_accepted": 5,
                        "drafting_rounds": 2, "draft_n_lookup": 4, "draft_n_accepted_lookup": 4,
                        "draft_n_suffix": 3, "draft_n_accepted_suffix": 1}}
    assert answer_of(body)["by_drafter"] == {"lookup": {"drafted": 4, "accepted": 4},
                                             "suffix": {"drafted": 3, "accepted": 1}}
    body["timings"] = {"predicted_per_second": 20.0, "predicted_n": 9}   # llama-server's
    assert answer_of(body)["by_drafter"] == {}


def test_the_short_form_is_the_workloads_first_turns_and_extractions_in_its_order():
    whole = json.loads(WORKLOAD.read_text())
    short = json.loads((WORKLOAD.parent / "agent_workload_retries.json").read_text())
    kept = [s for s in whole["sessions"] if s["part"] != "tools"]
    assert [s["id"] for s in short["sessions"]] == [s["id"] for s in kept]
    for mine, theirs in zip(short["sessions"], kept):
        assert mine == (dict(theirs, turns=theirs["turns"][:1]) if theirs["part"] == "rewrite" else theirs)
    assert {k: v for k, v in short.items() if k not in ("sessions", "about")} == \
        {k: v for k, v in whole.items() if k not in ("sessions", "about")}
