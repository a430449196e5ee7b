"""The measurement scripts run end to end on tiny models: the ones a GPU session runs in one call
(scripts/gpu) and the replay and host-overhead tools they use, so none of them rots unseen."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.params import SpeculationParams

ROOT = Path(__file__).resolve().parents[2]


def script(*args: str, timeout: int = 600) -> str:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_qwen_shaped_model_loads_and_generates(tmp_path):
    out = script("scripts/gpu/make_shapes.py", str(tmp_path), "--shapes", "tiny")
    path = Path(out.split("\t")[1])
    from app.core.gguf.info import read_gguf_info

    info = read_gguf_info(path)
    assert (info.architecture, info.quantization, info.vocab_size, info.n_layers) == ("qwen2", "Q4_K_M", 151_936, 4)
    types = {name: size for name, size in info.tensor_bytes}
    assert types["blk.3.attn_v.weight"] > types["blk.0.attn_v.weight"]  # Q6_K where Q4_K_M gives more bits
    summary = json.loads(script("-m", "app.cli", "--data-dir", str(tmp_path / "d"), "generate", "-m", str(path),
                                "-p", "hi", "-n", "6", "--json"))
    assert summary["generated_tokens"] == 6


def test_a_qwen35_shaped_model_carries_its_mtp_layer_and_drafts_with_it(tmp_path):
    """measure.py times an MTP step on this shape: laid out by the tiny models' qwen35 writer, quantized."""
    out = script("scripts/gpu/make_shapes.py", str(tmp_path), "--shapes", "qwen35-tiny")
    path = Path(out.split("\t")[1])
    from app.core.gguf.info import read_gguf_info

    info = read_gguf_info(path)
    assert (info.architecture, info.quantization, info.vocab_size, info.mtp_layers) == ("qwen35", "Q4_K_M", 151_936, 1)
    summary = json.loads(script("-m", "app.cli", "--data-dir", str(tmp_path / "d"), "generate", "-m", str(path),
                                "-p", "hi", "-n", "8", "--drafter", "mtp", "--policy", "fixed", "--draft-max", "1",
                                "--json"))
    assert summary["drafted"] > 0 and summary["draft_s"] > 0


def test_record_then_replay_with_another_machines_profile(tiny_models, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"code-{i}", "messages": [{"role": "user", "content": t}]})
                                 for i, t in enumerate(["the cat sat on the mat", "a dog is on the mat"])))
    traces = tmp_path / "traces.json"
    script("scripts/policy_replay.py", "record", str(tiny_models.main), str(tiny_models.same), "--prompts",
           str(prompts), "-n", "12", "-t", "1", "-o", str(traces))
    profile = tmp_path / "gpu.json"
    profile.write_text(json.dumps({"key": {}, "main_batch_s": [0.010 + 0.0002 * n for n in range(17)],
                                   "draft_step_s": 0.002}))
    catch_up = tmp_path / "catch-up.json"
    catch_up.write_text(json.dumps({"1": 0.002, "64": 0.004}))
    out = script("scripts/policy_replay.py", "replay", str(traces), str(profile), "--drafter", "model",
                 "--catch-up", str(catch_up))
    assert "median" in out and "code-0" in out


def test_host_overhead_prints_its_table(tiny_models, tmp_path):
    out = script("scripts/host_overhead.py", str(tiny_models.main), str(tiny_models.same), "-n", "8",
                 "--repeat", "1", "-t", "1", "--drafters", "model", "--json", str(tmp_path / "o.json"))
    assert "ms/drafted" in out and "top probability of one row" in out
    rounds = json.loads((tmp_path / "o.json").read_text())["rounds"]
    assert rounds[0]["drafted"] > 0 and 0 < rounds[0]["host_fraction"] < 1


def test_replay_against_a_drifting_machine_learns_the_new_costs():
    traces = ROOT / "scripts/gpu/data/qwen2.5-coder-1.5b+0.5b-traces.json"
    profile = ROOT / "tests/scripts/cpu-2core-profile.json"
    out = script("scripts/policy_replay.py", "replay", str(traces), str(profile), "--drafter", "lookup",
                 "--drift", "2x@50%", "--only", "edit-1", "edit-2", "code-1", "chat-1")
    assert "of the lookup bound: chat" in out and "edit" in out
    learned = [float(x) for x in out.split("at the end:")[1].split()]
    assert all(0.9 <= r <= 1.1 for r in learned[:3])   # batches of 1, 2 and 4: the doubled costs were learned


def replay_medians(out: str) -> dict[str, float]:
    """Per category, the median speedup a replay printed ("  code: median 1.00x, ...")."""
    lines = [line.split(":") for line in out.splitlines() if line.startswith("  ") and "median" in line]
    return {name.strip(): float(rest.split("median")[1].split("x")[0]) for name, rest in lines}


def test_replay_from_a_profile_stored_under_load_is_as_fast_as_from_the_right_one():
    """The real pair's recorded answers replayed on a quiet 2-core machine's costs, the policy learning
    from a profile calibrated there while another process kept a core busy (a batch of 17 at 5 steps
    instead of 8.5, steps 2.6 times as long): within 3% of learning from the quiet profile itself, in
    every category, over all the benchmark prompts. Before stale profiles were dropped the busy start
    lost 6% on the first answer. (The cold start after the drop tries the batch sizes it has not
    measured in its first long copies, so the first two edit answers alone read 4% slower.)"""
    traces = ROOT / "scripts/gpu/data/qwen2.5-coder-1.5b+0.5b-traces.json"
    quiet, busy = (ROOT / f"tests/scripts/cpu-2core-epyc-{k}-profile.json" for k in ("quiet", "busy"))
    right = replay_medians(script("scripts/policy_replay.py", "replay", str(traces), str(quiet), "--learn"))
    stale = replay_medians(script("scripts/policy_replay.py", "replay", str(traces), str(quiet),
                                  "--start-from", str(busy)))
    assert set(right) == set(stale) == {"chat", "code", "edit"}
    assert all(stale[k] >= 0.97 * right[k] for k in right), (stale, right)


def test_drift_bench_runs_its_three_scenarios(tiny_models, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"edit-{i}", "prompt": t})
                                 for i, t in enumerate(["the cat sat on the mat, the cat sat", "a dog, a dog, a dog"])))
    out = script("scripts/drift_bench.py", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "--prompts",
                 str(prompts), "-n", "6", "--draft-max", "3", "-t", "1", "--json", str(tmp_path / "d.json"))
    assert "time to first token" in out and "stale profile" in out and "median before" in out
    results = json.loads((tmp_path / "d.json").read_text())
    assert [r["prompt"] for r in results["fresh"]["rows"]] == ["edit-0", "edit-1"]
    assert all(r["cost_rounds"] > 0 for r in results["fresh"]["rows"])
    stale = results["stale"]
    assert [r["prompt"] for r in stale["rows"]] == ["edit-0", "edit-1"] and stale["ratio"] > 0
    assert all(len(r["tps"]["busy"]) == len(r["tps"]["quiet"]) == len(r["tps"]["alone"]) == 2 for r in stale["rows"])
    load = results["load"]
    assert [r["prompt"] for r in load["before"] + load["after"]] == ["edit-0", "edit-1"]
    assert all(len(r["tps"]["alone"]) == len(r["tps"]["spec"]) == len(r["tps"]["control"]) == 2
               for r in load["before"] + load["after"])
    assert load["control_before"] > 0 and load["control_after"] > 0 and "A/A" in out
    costs = load["after"][-1]["costs_after"]
    batch_max = SpeculationParams(draft_max=3).batch_max   # copies to 12: batches to 13
    assert costs["step_s"] > 0 and costs["batch_steps"][0] == 1.0 and len(costs["batch_steps"]) == batch_max == 13
    assert 1 in costs["measured"]


def test_trace_rates_count_each_drafted_token_up_to_the_first_wrong_one():
    """The in-sample rates the `--rates traces` reference drafts by: every position's lookup proposal
    counted up to its first wrong token (the ones after it are never verified), and every guess of
    the draft model, bucketed as the policy buckets them."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from policy_replay import TraceRates

    from app.core.speculation.acceptance import LOOKUP, MODEL, LookupMatch

    # answer 5 6 7 1: at 1 token the prompt's "5" proposes 6 7 8 ... (two right), at 2 tokens "5 6"
    # proposes 7 8 ... (one right), at 3 tokens "5 6 7" proposes 8 ... (none right); every token of a
    # copy is scored by the match it copies
    trace = dict(prompt=[5, 6, 7, 8, 9], tokens=[5, 6, 7, 1], draft_tokens=[5, 6, 2, 1], draft_p=[0.95, 0.93, 0.42, 0.47])
    rates = TraceRates([trace])
    assert rates.chance(LOOKUP, 0, LookupMatch(1, in_prompt=True)) == 1.0
    assert rates.chance(LOOKUP, 1, LookupMatch(1, in_prompt=True)) == 0.5   # 7 right after 6, then 8 wrong
    assert rates.chance(LOOKUP, 0, LookupMatch(2, in_prompt=True)) == 1.0
    assert rates.chance(LOOKUP, 1, LookupMatch(2, in_prompt=True)) == 0.0   # 8 wrong after 7
    assert rates.chance(LOOKUP, 0, LookupMatch(3, in_prompt=True)) == 0.0
    assert rates.chance(MODEL, 0, 0.94) == 1.0 and rates.chance(MODEL, 3, 0.45) == 0.5
    rates.update(LOOKUP, 0, LookupMatch(3, in_prompt=True), True)   # known from the start, never learned
    assert rates.chance(LOOKUP, 0, LookupMatch(3, in_prompt=True)) == 0.0


def test_replay_with_the_traces_own_rates_prints_its_fractions_of_the_bound():
    traces = ROOT / "scripts/gpu/data/qwen2.5-coder-1.5b+0.5b-traces.json"
    profile = ROOT / "tests/scripts/cpu-2core-epyc-quiet-profile.json"
    only = ("--only", "edit-1", "edit-3", "code-1")
    known = script("scripts/policy_replay.py", "replay", str(traces), str(profile), "--drafter", "lookup",
                   "--rates", "traces", *only)
    learned = script("scripts/policy_replay.py", "replay", str(traces), str(profile), "--drafter", "lookup", *only)
    fractions = [line for line in (known, learned) for line in line.splitlines() if "of the lookup bound" in line]
    assert len(fractions) == 2 and all("edit" in line and "code" in line for line in fractions)
    assert known != learned  # the rates change what is drafted


def test_replay_with_each_answers_own_rates_differs_from_the_pooled_rates_only_over_several_answers():
    """`--rates answer` gives each answer its own in-sample rates: over one answer they are the pooled
    rates of `--rates traces`, over several they are not (edit-3's copies are not diluted by code-1's)."""
    assert _replay_rows("answer", "edit-3") == _replay_rows("traces", "edit-3")
    own, pooled = _replay_rows("answer", "edit-3", "code-1"), _replay_rows("traces", "edit-3", "code-1")
    assert own["edit-3"] == _replay_rows("answer", "edit-3")["edit-3"]  # each answer on its own
    assert own != pooled


def test_replay_with_fresh_rates_drafts_each_answer_as_if_it_came_first():
    """`--rates fresh` learns each answer's acceptance from the priors anew, as a one-shot `quickdraft
    generate` does: edit-4 after edit-3 replays as edit-4 alone, where the learned rates carry edit-3's
    copies into it (the replay keeps the traces' order)."""
    alone = _replay_rows("learned", "edit-4")["edit-4"]
    assert _replay_rows("fresh", "edit-3", "edit-4")["edit-4"] == alone
    assert _replay_rows("learned", "edit-3", "edit-4")["edit-4"] != alone


def _replay_rows(rates: str, *only: str) -> dict[str, str]:
    """Prompt id -> its row, replaying the shared recording's ``only`` prompts with lookup on a jumpy
    2-core profile and ``--rates rates``."""
    traces = ROOT / "scripts/gpu/data/qwen2.5-coder-1.5b+0.5b-traces.json"
    profile = ROOT / "tests/scripts/cpu-2core-epyc-jumpy-profile.json"
    out = script("scripts/policy_replay.py", "replay", str(traces), str(profile), "--drafter", "lookup",
                 "--rates", rates, "--only", *only)
    return {line.split()[0]: line for line in out.splitlines() if line.startswith(only)}


def test_replay_with_noisy_times_learns_from_them_and_repeats_with_its_seed():
    """`--noise` varies each replayed batch's time (seeded): the policy learns from those times, so
    the rounds differ from a noiseless replay's, and the same seed replays the same."""
    traces = ROOT / "scripts/gpu/data/qwen2.5-coder-1.5b+0.5b-traces.json"
    profile = ROOT / "tests/scripts/cpu-2core-epyc-jumpy-profile.json"

    def replay(*extra: str) -> str:
        return script("scripts/policy_replay.py", "replay", str(traces), str(profile), "--drafter", "lookup",
                      "--only", "edit-3", "edit-4", *extra)

    noisy = replay("--noise", "0.15", "--seed", "3")
    assert noisy == replay("--noise", "0.15", "--seed", "3")
    assert noisy != replay("--noise", "0.15", "--seed", "4")
    assert noisy != replay("--learn")
    assert replay("--noise", "0") == replay()


def test_the_replayed_machines_noise_keeps_its_mean_and_spares_the_references():
    sys.path.insert(0, str(ROOT / "scripts"))
    from policy_replay import Machine

    from app.core.speculation.costmodel import CostProfile

    profile = CostProfile(key={}, main_batch_s=[0.02, 0.03])
    machine = Machine(profile, 1000, noise=0.15, seed=1)
    times = [machine.main_batch(2) for _ in range(20000)]
    assert abs(statistics.mean(times) / 0.03 - 1) < 0.01 and statistics.pstdev(times) / 0.03 > 0.1
    assert {machine.main_batch(2, position=5) for _ in range(10)} == {0.03}   # the main model alone's



def test_ngram_bench_pairs_each_side_with_its_own_plain_run_and_reports_the_aa_noise():
    sys.path.insert(0, str(ROOT / "scripts"))
    from ngram_bench import summarize, table

    def run(tps, drafted=0, accepted=0):
        return dict(tps=tps, drafted=drafted, accepted=accepted)

    results = {"copy-1": {
        "plain": [run(10.0), run(8.0)], "plain-aa": [run(11.0), run(8.0)], "lookup": [run(15.0, 40, 30), run(8.0, 20, 10)],
        "llama": [run(20.0), run(10.0)], "ngram-mod": [run(30.0, 64, 48), run(12.0, 0, 0)]}}
    summary = summarize(results)
    row = summary["prompts"]["copy-1"]
    assert row["lookup"]["runs"] == [1.5, 1.0] and row["lookup"]["speedup"] == 1.25   # over our plain, paired
    assert row["ngram-mod"]["runs"] == [1.5, 1.2]                                     # over llama.cpp's plain
    assert row["lookup"]["acceptance"] == 40 / 60 and row["ngram-mod"]["acceptance"] == 48 / 64
    assert summary["aa_noise"] == dict(median=1.05, worst=pytest.approx(0.1), n=2)
    printed = table(summary, list(results["copy-1"]))
    assert "| copy-1 | 1.05x | 1.25x (67% of 30) | 1.35x (75% of 32) |" in printed and "A/A noise" in printed


def test_ngram_bench_names_a_drafting_run_whose_greedy_answer_is_not_the_plain_runs():
    sys.path.insert(0, str(ROOT / "scripts"))
    from ngram_bench import summarize, table

    def run(text):
        return dict(tps=10.0, drafted=4, accepted=2, text=text)

    results = {"edit-1": {"plain": [run("a"), run("b")], "plain-aa": [run("a"), run("b")],
                          "lookup": [run("a"), run("c")]}}
    summary = summarize(results)
    assert summary["prompts"]["edit-1"]["lookup"]["same_text"] == 1
    assert "Answers differing from their side's plain run: edit-1 lookup" in table(summary, list(results["edit-1"]))
    results["edit-1"]["lookup"][1]["text"] = "b"
    assert "Every drafting run's answer is its plain run's." in table(summarize(results), list(results["edit-1"]))


def test_ngram_bench_marks_a_prompt_llama_cpp_answered_otherwise_than_ours():
    sys.path.insert(0, str(ROOT / "scripts"))
    from ngram_bench import summarize, table

    def run(text):
        return dict(tps=10.0, drafted=0, accepted=0, text=text)

    results = {"edit-4": {"plain": [run("To modify"), run("To modify")], "plain-aa": [run("To modify")] * 2,
                          "llama": [run("```python"), run("To modify")]},
               "copy-1": {"plain": [run("The organisation")] * 2, "plain-aa": [run("The organisation")] * 2,
                          "llama": [run("The organisation met")] * 2}}   # llama.cpp decodes a token more
    printed = table(summarize(results), ["plain", "plain-aa", "llama"])
    assert "| edit-4 ‡ |" in printed and "| copy-1 |" in printed
    assert "‡ llama.cpp's plain answer was not ours (another answer, not the same work): edit-4" in printed


def test_ngram_bench_gives_llama_cpp_the_prompt_whole_and_reads_its_answer(tmp_path):
    # llama.cpp drops the last newline of a -f file, and a rendered prompt ends with one
    # ("<|im_start|>assistant\n"): without it llama.cpp answered another prompt
    sys.path.insert(0, str(ROOT / "scripts"))
    from ngram_bench import llama_answer, llama_prompt, write_llama_prompt

    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    write_llama_prompt(tmp_path / "p.txt", prompt)
    read = (tmp_path / "p.txt").read_text()
    assert read[:-1] == prompt and llama_prompt(tmp_path / "p.txt") == prompt   # what llama.cpp keeps of it
    assert llama_answer("\n\n" + prompt + "Hello there.\n\n\n\n", prompt) == "Hello there."
    assert llama_answer("\n\n" + prompt[:-1] + "Hello", prompt) is None     # another prompt was read


def test_ngram_bench_resumes_only_a_run_made_with_the_same_settings(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import argparse

    from ngram_bench import resumed, save

    args = argparse.Namespace(main="m.gguf", draft="d.gguf", n_predict=128, threads=1, repeat=3, started="t",
                              resume=True, json=str(tmp_path / "run.json"))
    first = resumed(args)
    first["results"]["copy-1"] = {"plain": [dict(tps=10.0, drafted=0, accepted=0)],
                                  "plain-aa": [dict(tps=10.0, drafted=0, accepted=0)]}
    save(args, first)
    assert resumed(args)["results"] == first["results"]
    args.threads = 2
    with pytest.raises(SystemExit, match="threads"):
        resumed(args)


def ngram_bench_commands(monkeypatch, stderr: str = "") -> tuple:
    """scripts/ngram_bench.py with its subprocesses faked: (the module, the commands it runs)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import subprocess

    import ngram_bench

    ran = []
    monkeypatch.setattr(ngram_bench.subprocess, "run",
                        lambda cmd, **kw: ran.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", stderr))
    return ngram_bench, ran


def test_ngram_bench_calibrates_both_of_our_profiles_before_the_runs_when_asked(tmp_path, monkeypatch):
    import argparse

    ngram_bench, ran = ngram_bench_commands(monkeypatch)
    args = argparse.Namespace(main="m.gguf", draft="d.gguf", threads=1)
    ngram_bench.calibrate(args, tmp_path / "data")
    assert [c[c.index("calibrate"):] for c in ran] == [["calibrate", "-m", "m.gguf", "-t", "1"],
                                                       ["calibrate", "-m", "m.gguf", "-t", "1", "-md", "d.gguf"]]
    assert all(c[c.index("--data-dir") + 1] == str(tmp_path / "data") for c in ran)


def test_ngram_bench_gives_llama_cpp_the_rendered_prompt_as_it_is(tmp_path, monkeypatch):
    # llama.cpp reads "\\n" in a -f prompt as a newline unless told not to: code with "\\n" in a string
    # was another prompt for it than for us (edit-1: another answer)
    import argparse

    ngram_bench, ran = ngram_bench_commands(monkeypatch, "decoded 10 tokens in 1.0 seconds\nn_drafted = 4\nn_accept = 2")
    args = argparse.Namespace(main="m.gguf", n_predict=16, threads=1, llama_bin=str(tmp_path))
    ngram_bench.write_llama_prompt(tmp_path / "p.txt", "a prompt\n")
    assert ngram_bench.llama(args, tmp_path / "p.txt", "ngram-simple")["accepted"] == 2
    assert "--no-escape" in ran[0]


def test_replay_feeds_the_suffix_index_each_answer_and_drafts_the_next_from_it(tmp_path):
    data = json.loads((ROOT / "scripts/gpu/data/qwen2.5-coder-1.5b+0.5b-traces.json").read_text())
    first = next(t for t in data["traces"] if t["id"] == "edit-1")
    data["traces"] = [{**first, "id": "edit-a"}, {**first, "id": "edit-b"}]   # the same request twice
    traces = tmp_path / "twice.json"
    traces.write_text(json.dumps(data))
    out = script("scripts/policy_replay.py", "replay", str(traces), str(ROOT / "tests/scripts/cpu-2core-profile.json"),
                 "--drafter", "suffix", "--suffix-index", "empty")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("edit-")}
    assert int(rows["edit-a"][4]) == 0   # accepted: nothing was in the index yet
    assert int(rows["edit-b"][4]) > 0.6 * len(first["tokens"])   # the first answer, fed, drafts the second


def test_suffix_index_size_prints_its_table_and_keeps_to_the_limit(tmp_path):
    out = script("scripts/suffix_index_size.py", "--days", "1", "--limit-mb", "1", "--lookups", "5",
                 "--json", str(tmp_path / "s.json"))
    assert "us/drafted" in out
    row = json.loads((tmp_path / "s.json").read_text())["rows"][0]
    assert 0 < row["log_bytes"] <= 1 << 20 and row["tokens"] > 0 and row["drafted"] > 0


def shapes_module():
    sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
    try:
        import make_shapes
    finally:
        sys.path.pop(0)
    return make_shapes


def test_random_q4_k_weights_average_to_nothing_so_hidden_states_stay_ordinary_numbers():
    """Weights of one sign add up layer by layer: the Llama-3.1-8B shape's hidden states reached 11,000
    and its EAGLE-3 drafter's half-precision sums overflowed into NaN on the H100."""
    import gguf
    import numpy as np

    make_shapes = shapes_module()
    blocks = make_shapes.random_blocks(np.random.default_rng(0), "Q4_K", 64, 4096, make_shapes.SPAN["Q4_K"])
    weights = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K)
    assert abs(weights.mean()) < 0.05 * weights.std()
    assert np.abs(weights).max() <= 0.5 / np.sqrt(4096) * 1.01


def test_every_qwen35_shape_has_a_delta_net_state_the_gpu_kernel_takes():
    """llama.cpp's CUDA gated delta-net kernel takes states 16 to 128 wide and aborts on any other (a
    Qwen3.5-9B shape with heads of 256 did, on the H100)."""
    make_shapes = shapes_module()
    widths = {key: spec.n_embd // spec.n_head for key, spec in make_shapes.LAID_OUT.items()
              if spec.architecture == "qwen35"}
    assert widths and all(width in (16, 32, 64, 128) for width in widths.values()), widths


def test_parallel_bench_scaling_sums_each_count_of_clients_tokens(tiny_models, tmp_path):
    """--scaling: 1 .. --clients clients at once, each its N tokens; the table's tokens/s are summed."""
    out = tmp_path / "scaling.json"
    table = script("scripts/parallel_bench.py", "-m", str(tiny_models.main), "--clients", "2", "--scaling", "6",
                   "--parallel", "2", "-t", "1", "-c", "512", "--data-dir", str(tmp_path / "d"), "--json", str(out))
    [rows] = json.loads(out.read_text())["runs"].values()
    assert [(r["clients"], r["tokens"]) for r in rows] == [(1, 6), (2, 12)]
    assert all(r["tokens_per_s"] == r["tokens"] / r["wall_s"] for r in rows)
    assert "| --parallel 2 | 2 | 12 |" in table and "1.00x" in table


def test_paired_bench_reads_each_drafting_run_against_the_plain_run_of_its_repeat():
    sys.path.insert(0, str(ROOT / "scripts"))
    from paired_bench import summarize, table

    def run(tps, drafted=0, accepted=0, text="a"):
        return dict(tps=tps, drafted=drafted, accepted=accepted, text=text)

    results = {"copy-1": {"plain": [run(10.0), run(8.0), run(10.0)], "plain-aa": [run(10.0), run(8.8), run(9.0)],
                          "before": [run(15.0, 40, 30), run(8.0, 20, 10), run(12.0, 5, 5)],
                          "after": [run(20.0, 40, 40), run(16.0, 20, 20, text="b"), run(10.0)]}}
    summary = summarize(results)
    assert summary["copy-1"]["before"]["ratios"] == [1.5, 1.0, 1.2] and summary["copy-1"]["before"]["median"] == 1.2
    assert summary["copy-1"]["after"]["same"] == 2 and summary["copy-1"]["after"]["accepted"] == 60
    printed = table(summary)
    assert "| copy-1 | 1.00x (1.00 1.10 0.90) | 1.20x (1.50 1.00 1.20), 45 of 65 | 2.00x (2.00 2.00 1.00), 60 of 60, " \
           "2/3 same |" in printed and printed.splitlines()[-1] == "| median | 1.00x | 1.20x | 2.00x |"


def test_paired_bench_runs_both_trees_and_batch_sizes_prints_the_padding(tiny_models, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "one", "messages": [{"role": "user", "content": "the cat the cat"}]}) + "\n")
    out = script("scripts/paired_bench.py", "--before", ".", "--after", ".", "-m", str(tiny_models.main),
                 "-md", str(tiny_models.same), "--prompts", str(prompts), "-n", "8", "--repeat", "1",
                 "--json", str(tmp_path / "pairs.json"))
    runs = json.loads((tmp_path / "pairs.json").read_text())["results"]["one"]
    assert set(runs) == {"plain", "plain-aa", "before", "after"} and runs["after"][0]["tokens"] == 8
    assert "| one |" in out and out.splitlines()[-1].startswith("| median |")
    sizes = script("scripts/batch_sizes.py", "-m", str(tiny_models.main), "--max", "18", "--context", "8",
                   "--repeat", "1", "--json", str(tmp_path / "sizes.json"))
    assert len(json.loads((tmp_path / "sizes.json").read_text())["main_batch_s"]) == 18
    assert sizes.splitlines()[0].split() == ["batch", "ms", "steps", "per", "token", "padded", "to"]


def test_batch_sizes_names_the_cheaper_bigger_batch_each_size_is_padded_to():
    sys.path.insert(0, str(ROOT / "scripts"))
    from batch_sizes import table

    printed = table([0.04, 0.08, 0.12, 0.11, 0.2]).splitlines()
    assert printed[3].split() == ["3", "120.0", "3.00", "1.00", "4"] and printed[4].split() == ["4", "110.0", "2.75", "0.69"]


def test_copy_runs_cuts_an_answer_into_its_prompt_runs_and_prices_fixed_drafts(tmp_path):
    """copy_runs.py (issue 43): the answer's longest runs in its prompt, left to right, and the tokens a
    main step fixed drafts from a run's key-th token make; the script prints both tables end to end."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from copy_runs import fixed_drafts, long_runs, prompt_runs, went_on

    from app.core.speculation.costmodel import CostProfile

    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 40]
    # 1 2 3 4 5 is the prompt's start, 9 is not in it, 2 3 40 is its end (not 2 3 4: the longer run wins)
    assert prompt_runs(prompt, [1, 2, 3, 4, 5, 99, 2, 3, 40]) == [(0, 5), (5, 0), (6, 3)]
    trace = {"prompt": json.dumps(prompt), "tokens": [1, 2, 3, 4, 5, 99, 2, 3, 40, 7]}
    assert long_runs(trace, 3) == [(2, 7), (0, 1)]   # (went on after the key, left in the answer)
    # the second ran to the answer's end, the run above did not (the answer's last token is not its)
    assert went_on([(2, 7), (1, 1), (30, 40)], 16) == 2 and went_on([(0, 1)], 16) == 0
    linear = CostProfile(key={}, main_batch_s=[0.1 * n for n in range(1, 65)])   # a batch costs its tokens
    # a run going on 10 tokens, drafted 4 at a time: 4+1, 4+1, then 0 of a draft of 4 right: 11 tokens
    assert fixed_drafts(10, 50, 4, linear) == (11, pytest.approx(15.0))
    assert fixed_drafts(10, 6, 48, linear) == (7, pytest.approx(7.0))   # capped at what the answer has left
    traces = tmp_path / "traces.json"
    traces.write_text(json.dumps({"traces": [trace]}))
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"key": {}, "main_batch_s": [0.1 * n for n in range(1, 65)]}))
    out = script("scripts/copy_runs.py", "--traces", str(traces), "--profiles", str(profile), "--key", "3",
                 "--drafts", "2", "4", "--json", str(tmp_path / "out.json"))
    assert "| traces | 2 | 0 | 0 |" in out and "| profile.json | 0.80 / 0.57 |" in out
    assert json.loads((tmp_path / "out.json").read_text())["runs"] == {"traces": [[2, 7], [0, 1]]}
