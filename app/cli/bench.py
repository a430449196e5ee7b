"""The speed benchmark: for each prompt, the main model alone and then speculative decoding, greedy,
in the same process, so the ratio is measured side by side."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from app.core.chat.prompt import check_messages
from app.core.compare import CompareResult, compare_greedy, logit_margin
from app.core.engine import Engine
from app.core.errors import QuickdraftError
from app.core.params import DrafterKind, SpeculationParams


@dataclass
class PromptResult:
    prompt_id: str
    prompt_tokens: int
    base_tps: float
    spec_tps: float
    speedup: float
    acceptance: float
    mean_accepted_length: float
    tokens_per_round: float
    drafted: int
    accepted: int
    rounds: int
    drafting_rounds: int
    mean_draft_length: float
    draft_ms_per_round: float
    verify_ms_per_round: float
    base_tokens: int
    spec_tokens: int
    identical: bool
    first_difference: int | None = None
    difference_margin: float | None = None
    llama_tps: float | None = None
    engine_vs_llama: float | None = None
    base_runs_tps: list[float] = field(default_factory=list)   # every run, in order
    spec_runs_tps: list[float] = field(default_factory=list)
    paired_speedup: float | None = None  # with --repeat: the median of each run pair's ratio
    estimated_speedup: float | None = None  # what the speculative run's Summary estimated (None: no cost model)

    @property
    def estimate_error(self) -> float | None:
        """How far the estimate is from the measured speedup (estimate / measured - 1)."""
        return self.estimated_speedup / self.speedup - 1 if self.estimated_speedup and self.speedup else None


@dataclass
class BenchReport:
    settings: dict
    results: list[PromptResult] = field(default_factory=list)

    def medians(self) -> dict:
        def med(values: Iterable[float | None]) -> float | None:
            vals = [v for v in values if v is not None]
            return statistics.median(vals) if vals else None
        r = self.results
        return {
            "base_tps": med(x.base_tps for x in r),
            "spec_tps": med(x.spec_tps for x in r),
            "speedup": med(x.speedup for x in r),
            "min_speedup": min((x.speedup for x in r), default=None),
            "paired_speedup": med(x.paired_speedup for x in r),
            "min_paired_speedup": min((x.paired_speedup for x in r if x.paired_speedup is not None), default=None),
            "acceptance": med(x.acceptance for x in r),
            "mean_accepted_length": med(x.mean_accepted_length for x in r),
            "mean_draft_length": med(x.mean_draft_length for x in r),
            "identical": sum(x.identical for x in r),
            "llama_tps": med(x.llama_tps for x in r),
            "engine_vs_llama": med(x.engine_vs_llama for x in r),
            "estimated_speedup": med(x.estimated_speedup for x in r),
            "estimate_abs_error": med(abs(x.estimate_error) for x in r if x.estimate_error is not None),
        }

    def to_json(self) -> dict:
        return {"settings": self.settings, "results": [asdict(x) for x in self.results],
                "medians": self.medians()}


def load_prompts(paths: Sequence[str | Path]) -> list[tuple[str, list[dict]]]:
    """(id, messages) from JSONL files: {"id": ..., "messages": [...]} or {"prompt": "..."} lines.
    A file that cannot be read or a line of the wrong shape raises QuickdraftError naming the line."""
    prompts = []
    for path in paths:
        for n, line in enumerate(_read_lines(Path(path)), 1):
            if line.strip():
                prompts.append(_prompt_line(Path(path), n, line))
    if not prompts:
        raise QuickdraftError(f"No prompts in {', '.join(str(p) for p in paths)}.")
    return prompts


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise QuickdraftError(f"Cannot read prompts from {path}: {getattr(exc, 'strerror', None) or exc}") from exc


def _prompt_line(path: Path, n: int, line: str) -> tuple[str, list[dict]]:
    try:
        item = json.loads(line)
        if not isinstance(item, dict):
            raise QuickdraftError("it is not a JSON object")
        if "messages" in item:
            messages = check_messages(item["messages"])
        elif isinstance(item.get("prompt"), str):
            messages = check_messages([{"role": "user", "content": item["prompt"]}])
        else:
            raise QuickdraftError('it has neither "messages" nor a "prompt" text')
    except (ValueError, QuickdraftError) as exc:
        raise QuickdraftError(f"{path} line {n} is not a prompt: {exc} (expected "
                              f'{{"id": ..., "messages": [...]}} or {{"prompt": "..."}})') from None
    return str(item.get("id", f"{path.stem}-{n}")), messages


def bench_prompt(engine: Engine, prompt_id: str, messages: list[dict], n_predict: int,
                 speculation: SpeculationParams, drafter: DrafterKind,
                 llama_baseline: Callable[[list[int], int], float] | None = None, repeat: int = 1) -> PromptResult:
    """Main alone, then speculative, alternating ``repeat`` times; each keeps its fastest run (load
    from other programs only ever slows a run down, so the fastest is the least disturbed). With
    repeats there is a second estimate, the median ratio of the runs paired in time
    (see ``paired_speedup``)."""
    tokens = list(engine.prompt(messages).tokens)
    runs = [compare_greedy(engine, tokens, drafter, n_predict, speculation) for _ in range(repeat)]
    bases, specs = [r.baseline for r in runs], [r.speculative for r in runs]
    fastest = CompareResult(max(specs, key=lambda s: s.generation_tps), max(bases, key=lambda s: s.generation_tps))
    base, spec, diff = fastest.baseline, fastest.speculative, fastest.first_difference
    margin = None
    if diff is not None and diff < len(base.token_ids):
        margin = logit_margin(engine, tokens + list(base.token_ids[:diff])).margin
    llama_tps = max(llama_baseline(tokens, n_predict) for _ in range(repeat)) if llama_baseline else None
    base_runs, spec_runs = [s.generation_tps for s in bases], [s.generation_tps for s in specs]
    rounds = max(spec.rounds, 1)
    return PromptResult(
        prompt_id=prompt_id,
        prompt_tokens=len(tokens),
        base_tps=base.generation_tps,
        spec_tps=spec.generation_tps,
        speedup=fastest.speedup,
        acceptance=spec.acceptance_rate,
        mean_accepted_length=spec.mean_accepted_length,
        tokens_per_round=spec.tokens_per_round,
        drafted=spec.drafted,
        accepted=spec.accepted,
        rounds=spec.rounds,
        drafting_rounds=spec.drafting_rounds,
        mean_draft_length=spec.drafted / rounds,
        draft_ms_per_round=1000 * spec.draft_s / rounds,
        verify_ms_per_round=1000 * spec.verify_s / rounds,
        base_tokens=base.generated_tokens,
        spec_tokens=spec.generated_tokens,
        identical=diff is None,
        first_difference=diff,
        difference_margin=margin,
        llama_tps=llama_tps,
        engine_vs_llama=base.generation_tps / llama_tps if llama_tps else None,
        base_runs_tps=base_runs,
        spec_runs_tps=spec_runs,
        paired_speedup=paired_speedup(base_runs, spec_runs),
        estimated_speedup=spec.estimated_speedup,
    )


def paired_speedup(base_tps: Sequence[float], spec_tps: Sequence[float]) -> float | None:
    """The median of spec/base over runs made one after the other. A burst of load that lasts
    longer than a run slows both runs of a pair and cancels out; one that hits a single run moves
    one ratio, which the median ignores. None without at least two pairs."""
    ratios = [s / b for b, s in zip(base_tps, spec_tps) if b > 0]
    return statistics.median(ratios) if len(ratios) >= 2 else None


def format_table(report: BenchReport) -> str:
    has_llama = any(r.llama_tps for r in report.results)
    has_pairs = any(r.paired_speedup is not None for r in report.results)
    has_estimates = any(r.estimated_speedup is not None for r in report.results)
    head = ["prompt", "tok", "base t/s", "spec t/s", "speedup", *_when(has_pairs, "paired"),
            *_when(has_estimates, "est."), "accept", "acc len",
            "draft len", "0-draft", "draft ms", "verify ms", "same"]
    if has_llama:
        head += ["llama t/s", "ours/llama"]
    rows = [head]
    for r in report.results:
        same = "yes" if r.identical else f"@{r.first_difference}" + (
            f" (margin {r.difference_margin:.3f})" if r.difference_margin is not None else "")
        row = [r.prompt_id, str(r.spec_tokens), f"{r.base_tps:.2f}", f"{r.spec_tps:.2f}", f"{r.speedup:.2f}x",
               *_when(has_pairs, _f(r.paired_speedup, "x")), *_when(has_estimates, _f(r.estimated_speedup, "x")),
               f"{100 * r.acceptance:.0f}%",
               f"{r.mean_accepted_length:.2f}", f"{r.mean_draft_length:.2f}", str(r.rounds - r.drafting_rounds),
               f"{r.draft_ms_per_round:.1f}", f"{r.verify_ms_per_round:.1f}", same]
        if has_llama:
            row += [f"{r.llama_tps:.2f}" if r.llama_tps else "-",
                    f"{r.engine_vs_llama:.3f}" if r.engine_vs_llama else "-"]
        rows.append(row)
    m = report.medians()
    med = ["median", "", _f(m["base_tps"]), _f(m["spec_tps"]), _f(m["speedup"], "x"),
           *_when(has_pairs, _f(m["paired_speedup"], "x")), *_when(has_estimates, _f(m["estimated_speedup"], "x")),
           _f(m["acceptance"] and 100 * m["acceptance"], "%", 0),
           _f(m["mean_accepted_length"]), _f(m["mean_draft_length"]), "", "", "",
           f"{m['identical']}/{len(report.results)}"]
    if has_llama:
        med += [_f(m["llama_tps"]), _f(m["engine_vs_llama"], "", 3)]
    rows.append(med)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    if m["min_speedup"] is not None:
        paired = f" (paired runs: {m['min_paired_speedup']:.2f}x)" if m["min_paired_speedup"] is not None else ""
        lines.append(f"slowest prompt: {m['min_speedup']:.2f}x of the main model alone{paired}")
    if m["estimate_abs_error"] is not None:
        lines.append(f"estimated speedup (each answer's footer) vs measured: median error "
                     f"{100 * m['estimate_abs_error']:.0f}%")
    return "\n".join(lines)


def _when(condition: bool, cell: str) -> list[str]:
    """A table cell present only in some tables (the paired estimate needs repeats)."""
    return [cell] if condition else []


def _f(value: float | None, suffix: str = "", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"
