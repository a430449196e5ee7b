"""quickdraft: the headless command line, on the same engine as the app.

    quickdraft generate --main M [--draft D] -p PROMPT [--grammar FILE | --json-schema FILE] [--think|--no-think]
    quickdraft generate --remote URL [--api-key K] [--remote-model NAME] -p PROMPT
    quickdraft serve --main M [--draft D] [--host 127.0.0.1] [--port 8080] [--api-key K]
    quickdraft bench --main M --draft D --prompts FILE...
    quickdraft info [FILE.gguf] [-m MAIN [-md DRAFT]]
    quickdraft check-pair MAIN DRAFT
    quickdraft models ...
    quickdraft suffix-index status|clear|on|off [-m MAIN] [--limit-mb N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from app import __version__
from app.cli.model_args import add_chat_template_arg, load_engine, model_params
from app.cli.suffix_index import add_suffix_flag, add_suffix_index_parser
from app.core.params import DEFAULT_DRAFTER, DrafterKind, PolicyName
from app.paths import DATA_DIR_ENV


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _report_error(str(exc))
    if args.data_dir:
        os.environ[DATA_DIR_ENV] = str(Path(args.data_dir).expanduser().resolve())
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from app.core.errors import InvalidParameterError, QuickdraftError

    try:
        return args.handler(args)
    except InvalidParameterError as exc:
        return _report_error(f"{FLAGS.get(exc.name, exc.name)} {exc.problem}")
    except QuickdraftError as exc:
        return _report_error(str(exc))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


# the flag that sets each parameter the core validates (app/core/params.py), for its error message
FLAGS = {
    "temperature": "--temp", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p", "seed": "--seed",
    "max_tokens": "-n/--n-predict", "draft_max": "--draft-max", "draft_min": "--draft-min",
    "p_min": "--draft-p-min", "policy": "--policy", "n_gpu_layers": "-ngl/--gpu-layers", "n_ctx": "-c/--ctx",
    "n_threads": "-t/--threads", "draft n_gpu_layers": "-ngld/--gpu-layers-draft", "draft n_ctx": "-cd/--ctx-draft",
    "draft n_threads": "-td/--threads-draft", "repeat": "--repeat", "limit": "--limit",
}


def _report_error(message: str) -> int:
    """The one way a user's mistake ends the program: one ``error:`` line, exit status 1."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return 1


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag like every other user error (one ``error:`` line, status 1)
    instead of printing the usage and exiting with status 2."""

    def error(self, message: str):
        raise UsageError(f"{message} (see: {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="quickdraft", description="Local LLM chat with speculative decoding.")
    parser.add_argument("--version", action="version", version=f"quickdraft {__version__}")
    parser.add_argument("--data-dir", help=f"keep settings, data and models under this folder (or set {DATA_DIR_ENV})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gen = sub.add_parser("generate", help="answer a prompt, streaming, then print speculation statistics")
    _model_args(gen, main_required=False)
    _remote_args(gen)
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("-p", "--prompt", help="a user message")
    src.add_argument("--messages", help="a JSON file: a list of {role, content} messages")
    gen.add_argument("--system", help="a system message put before the prompt")
    gen.add_argument("-n", "--n-predict", type=int, default=256, help="most tokens to generate (256)")
    gen.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (0)")
    gen.add_argument("--top-k", type=int, default=40)
    gen.add_argument("--top-p", type=float, default=0.95)
    gen.add_argument("--min-p", type=float, default=0.05)
    gen.add_argument("--seed", type=int, default=None, help="random seed; -1 or left out = a fresh one each run")
    gen.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    gen.add_argument("--json", action="store_true", help="print one JSON summary instead of the stream")
    gen.add_argument("--logprobs", type=int, metavar="N", help="with --json: each token's log-probability and N alternatives")
    from app.cli import structured, thinking
    thinking.add_thinking_args(gen)
    structured.add_structured_args(gen)
    gen.set_defaults(handler=cmd_generate)

    bench = sub.add_parser("bench", help="main model alone vs speculative, greedy, per prompt, same process")
    _model_args(bench)
    bench.add_argument("--prompts", nargs="+", required=True, help="JSONL files of prompts")
    bench.add_argument("-n", "--n-predict", type=int, default=128)
    bench.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    bench.add_argument("--json", dest="json_out", help="write the results to this JSON file")
    bench.add_argument("--repeat", type=int, default=1,
                       help="run each configuration N times, alternating, and keep the fastest (noisy machines)")
    bench.add_argument("--llama-baseline", action="store_true",
                       help="also time llama-cpp-python's own Llama greedy loop on the main model")
    bench.set_defaults(handler=cmd_bench)

    from app.cli.info import add_info_parser

    add_info_parser(sub, _gpu_layer_args)

    pair = sub.add_parser("check-pair", help="can DRAFT draft for MAIN?")
    pair.add_argument("main")
    pair.add_argument("draft")
    pair.set_defaults(handler=cmd_check_pair)

    cal = sub.add_parser("calibrate", help="measure this machine's cost profile for a model pair (auto policy)")
    _model_args(cal)
    cal.set_defaults(handler=cmd_calibrate)

    _add_serve(sub)
    from app.models.cli import add_models_parser
    add_models_parser(sub)
    add_suffix_index_parser(sub)
    return parser


def _model_args(p: argparse.ArgumentParser, main_required: bool = True) -> None:
    p.add_argument("-m", "--main", required=main_required, help="the main model (GGUF)")
    p.add_argument("-md", "--draft", help="the draft model (GGUF), or a drafter file made for the main model: an "
                                          "MTP drafter (Gemma 4's assistant), an EAGLE-3 or a DFlash/DSpark "
                                          "drafter, which drafts whenever the draft model would")
    p.add_argument("--draft-max", type=int, default=16,
                   help="most tokens a model drafts per round (16); under --policy auto a copy of the text "
                        "(lookup, the suffix index) may run to 4x, at most 64")
    p.add_argument("--draft-min", type=int, default=0, help="drop drafts shorter than this (0)")
    p.add_argument("--draft-p-min", type=float, default=0.0,
                   help="stop drafting when the draft's top probability falls below this, under any policy (0 = off)")
    p.add_argument("--policy", choices=PolicyName.values(), default=PolicyName.AUTO.value,
                   help="auto: the draft length the machine's cost profile says pays best (default); "
                        "fixed: --draft-max every round; pmin: the same, named for its --draft-p-min")
    p.add_argument("--drafter", choices=DrafterKind.values(), default=None,
                   help="who drafts: the draft model (of any vocabulary: one of another drafts through text), "
                        "prompt lookup (n-gram copy), suffix (the index of past answers and prompts), lookup then "
                        "the model, "
                        "mtp (the main model's own MTP heads, or the MTP drafter given with --draft), "
                        "eagle3 or dflash (the EAGLE-3 or DFlash/DSpark drafter given with --draft: a block in one "
                        "pass), or nobody (default: lookup+model with --draft, the drafter file's kind with one, else "
                        "lookup; either with the suffix index after lookup when it is on)")
    _gpu_layer_args(p)
    add_suffix_flag(p)
    p.add_argument("-c", "--ctx", type=int, default=4096, help="context size of the main model (4096)")
    p.add_argument("-cd", "--ctx-draft", type=int, default=None, help="context size of the draft (= --ctx)")
    p.add_argument("-t", "--threads", type=int, default=None,
                   help="threads for the main model (default: learned as it answers, fewer when other programs "
                        "keep cores busy)")
    p.add_argument("-td", "--threads-draft", type=int, default=None, help="threads for the draft (= --threads; default: learned)")
    add_chat_template_arg(p)


def _gpu_layer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-ngl", "--gpu-layers", type=_gpu_layers, default="auto",
                   help="main model layers on the GPU: auto (what fits after the draft; default), -1 = all, or N")
    p.add_argument("-ngld", "--gpu-layers-draft", type=_gpu_layers, default="auto",
                   help="draft model layers on the GPU: auto (all if they fit; default), -1 = all, or N")
    p.add_argument("--device", default=None,
                   help="the GPU both models run on: auto (a discrete GPU first, then the most free memory; "
                        "default), cpu (none), or a name from `quickdraft info` (CUDA0, Vulkan1)")
    p.add_argument("--no-mmap", dest="mmap", action="store_false",
                   help="read the model files into memory instead of mapping them (slower to load; for files "
                        "on a network or removable disk)")


def _gpu_layers(text: str):
    from app.core.params import parse_gpu_layers

    try:
        return parse_gpu_layers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_serve(sub) -> None:
    from app.server.cli import add_serve_args

    serve = sub.add_parser("serve", help="an OpenAI-compatible HTTP server on the pair (127.0.0.1:8080)")
    _model_args(serve)
    add_serve_args(serve)
    serve.set_defaults(handler=cmd_serve)


def cmd_serve(args) -> int:
    from app.server.cli import serve, states_config

    def load():  # on the server's engine thread; the auto policy learns the machine's costs as it answers
        return load_engine(args, states_config(args))

    return serve(args, load, _speculation(args), _chosen_drafter(args))


def _remote_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remote", metavar="URL",
                   help="answer with an OpenAI-compatible server (llama-server, vLLM, quickdraft serve) instead of -m")
    p.add_argument("--api-key", default=os.environ.get("QUICKDRAFT_API_KEY"),
                   help="the server's API key (or set QUICKDRAFT_API_KEY)")
    p.add_argument("--remote-model", help="the server's model to use (default: the first it lists)")


def _generation_engine(args):
    """The remote server with --remote, else the local pair."""
    from app.core.errors import QuickdraftError

    if args.remote and args.main:
        raise QuickdraftError("give either a main model (-m) or a server (--remote), not both")
    if args.remote:
        from app.core.remote.client import RemoteEngine

        return RemoteEngine(args.remote, args.api_key, args.remote_model)
    if not args.main:
        raise QuickdraftError("give a main model (-m FILE.gguf) or a server (--remote URL)")
    return load_engine(args)


def _chosen_drafter(args) -> DrafterKind:
    """Who is asked to draft: --drafter, else the default (the loaded pair says who can: ``who_drafts``)."""
    return DrafterKind(args.drafter) if args.drafter else DEFAULT_DRAFTER


def _baseline_layers(params) -> int:
    """llama-cpp-python's own loop offloads to every GPU it sees: none where our pair runs on the CPU."""
    return 0 if params.device == "cpu" else params.n_gpu_layers


def _speculation(args):
    from app.core.params import SpeculationParams

    return SpeculationParams(draft_max=args.draft_max, draft_min=args.draft_min, p_min=args.draft_p_min,
                             policy=args.policy)


def _messages(args) -> list[dict]:
    from app.core.chat.prompt import check_messages

    if args.messages:
        from app.core.errors import QuickdraftError

        try:
            data = json.loads(Path(args.messages).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise QuickdraftError(f"cannot read messages from {args.messages}: {exc}") from exc
        return check_messages(data.get("messages") if isinstance(data, dict) else data)
    messages = [{"role": "system", "content": args.system}] if args.system else []
    return check_messages(messages + [{"role": "user", "content": args.prompt}])


def cmd_generate(args) -> int:
    from app.cli.structured import constrained, read_grammar, read_logprobs
    from app.cli.thinking import ReasoningPrinter, thinking_setup
    from app.core.chat.reasoning import split_reasoning
    from app.core.frontdoor import GenerationRequest
    from app.core.speculation.events import TokenPiece, run_to_summary
    from app.core.params import SamplingParams

    sampling = SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                              seed=None if args.seed == -1 else args.seed, max_tokens=args.n_predict,
                              stop=tuple(args.stop), logprobs=read_logprobs(args))
    speculation, messages, grammar = _speculation(args), _messages(args), read_grammar(args)
    if not args.remote:
        model_params(args)   # every value is checked before a model loads
    engine = _generation_engine(args)
    cancel = threading.Event()
    try:
        pair = engine.pair   # a server is asked for its model here
        placement = {} if pair.remote_url else dict(pair.placement)
        drafter = pair.who_drafts(_chosen_drafter(args))
        thinking, variables, note = thinking_setup(engine, args.think)
        if note:
            print(f"warning: {note}", file=sys.stderr)
        request, thinking = constrained(engine, GenerationRequest(messages, sampling=sampling, speculation=speculation,
                                        drafter=drafter, cancel=cancel, template_variables=variables), grammar, thinking)
        printer = ReasoningPrinter(thinking, args.reasoning)

        def show(event) -> None:
            if isinstance(event, TokenPiece) and not args.json:
                printer.feed(event.text)

        summary = run_to_summary(engine.generate(request), show)
    except KeyboardInterrupt:
        cancel.set()
        raise
    finally:
        engine.close()
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        from app.cli.info import system_summary

        extra = {} if args.remote else {"placement": placement, "backend": system_summary()}
        reasoning, answer = split_reasoning(thinking, summary.text)
        print(json.dumps({**summary.to_dict(), "reasoning": reasoning, "answer": answer, **extra}, indent=2))
    else:
        printer.finish()
        print(file=sys.stdout)
        n_draft = None if args.remote else args.draft_max if drafter is not DrafterKind.NONE else 0
        print(format_stats(summary, n_draft), file=sys.stderr)
        for name, where in placement.items():
            print(f"{name + ' model':<9} = {where}", file=sys.stderr)
    return 0 if summary.error is None else 1


def format_stats(s, n_draft: int | None) -> str:
    """The statistics block, in the shape llama.cpp's speculative example prints."""
    lines = [
        f"encoded {s.prompt_tokens_evaluated:4d} tokens in {s.prompt_s:8.3f} seconds, speed: {s.prompt_tps:8.3f} t/s",
        f"decoded {s.generated_tokens:4d} tokens in {s.generation_s:8.3f} seconds, speed: {s.generation_tps:8.3f} t/s",
        "",
    ]
    if not s.speculation_reported:  # a remote server said nothing about drafting: no zeros posing as counts
        return "\n".join(lines + ["speculation: not reported by the server", _stopped(s)])
    lines += [
        f"n_draft   = {'set by the server' if n_draft is None else n_draft}",
        f"n_predict = {s.generated_tokens}",
        f"n_drafted = {s.drafted}",
        f"n_accept  = {s.accepted}",
        f"accept    = {100 * s.acceptance_rate:.3f}%",
        f"rounds    = {s.rounds} ({s.drafting_rounds} drafted), {s.mean_accepted_length:.2f} accepted per drafting round",
        f"time      = draft {s.draft_s:.3f} s, verify {s.verify_s:.3f} s, first token {s.ttft_s:.3f} s",
    ]
    if s.drafted_by_position:
        by_pos = " ".join(f"{100 * r:.0f}%" for r in s.acceptance_by_position())
        lines.append(f"accept by draft position: {by_pos}")
    from app.cli.thinking import format_parts

    lines += format_parts(s)   # thinking, answer and tool calls apart, when there was more than one
    if s.threads:
        lines.append(f"threads   = main {s.threads}" + (f", draft {s.draft_threads}" if s.draft_threads else ""))
    lines.append(_stopped(s))
    return "\n".join(lines)


def _stopped(s) -> str:
    return f"stopped   = {s.stop_reason.value}" + (f" ({s.error})" if s.error else "")


def cmd_bench(args) -> int:
    from app.cli.bench import BenchReport, bench_prompt, format_table, load_prompts
    from app.core.llama.baseline import make_llama_baseline

    _check_bench_args(args)
    prompts = load_prompts(args.prompts)[: args.limit]
    speculation = _speculation(args)
    engine = load_engine(args)
    drafter = engine.pair.who_drafts(_chosen_drafter(args))
    baseline = (make_llama_baseline(args.main, args.ctx, args.threads, _baseline_layers(engine.main_params))
                if args.llama_baseline else None)
    from app.cli.info import system_summary

    report = BenchReport(settings={
        "main": args.main, "draft": args.draft, "n_predict": args.n_predict, "draft_max": args.draft_max,
        "draft_min": args.draft_min, "p_min": args.draft_p_min, "policy": args.policy, "drafter": drafter,
        "threads": args.threads, "ctx": args.ctx, "repeat": args.repeat, "gpu_layers": args.gpu_layers,
        "gpu_layers_draft": args.gpu_layers_draft, "prompts": args.prompts,
        "placement": dict(engine.pair.placement), "backend": system_summary()})
    try:
        for prompt_id, messages in prompts:
            result = bench_prompt(engine, prompt_id, messages, args.n_predict, speculation, drafter, baseline,
                                  args.repeat)
            report.results.append(result)
            print(f"{prompt_id}: {result.base_tps:.2f} -> {result.spec_tps:.2f} t/s ({result.speedup:.2f}x)",
                  file=sys.stderr, flush=True)
    finally:
        engine.close()
    print(format_table(report))
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
        print(f"wrote {args.json_out}", file=sys.stderr)
    return 0


def _check_bench_args(args) -> None:
    from app.core.errors import InvalidParameterError
    from app.core.params import SamplingParams

    SamplingParams(max_tokens=args.n_predict)
    if args.repeat < 1:
        raise InvalidParameterError("repeat", f"must be at least 1 (got {args.repeat})")
    if args.limit is not None and args.limit < 1:
        raise InvalidParameterError("limit", f"must be at least 1 (got {args.limit})")
    model_params(args)


def cmd_calibrate(args) -> int:
    """An explicit measurement; the auto policy does not need one (it learns as it answers)."""
    from app.cli.calibrate import calibrate

    return calibrate(load_engine(args), _speculation(args).batch_max)


def cmd_check_pair(args) -> int:
    from app.core.gguf.info import read_gguf_info
    from app.core.gguf.pair_check import check_pair

    main_info, draft_info = read_gguf_info(args.main), read_gguf_info(args.draft)
    result = check_pair(main_info, draft_info)
    for warning in result.warnings:
        print(f"warning: {warning}")
    if result.compatible:
        how = {DrafterKind.MTP: " (an MTP drafter: it drafts with MTP, on the main model's hidden states and memory)",
               DrafterKind.EAGLE3: " (an EAGLE-3 drafter: it drafts from the main model's hidden states at its "
                                   "layers " + ", ".join(map(str, draft_info.target_layers)) + ")",
               DrafterKind.DFLASH: f" (a {draft_info.hidden_state_drafter} drafter: it drafts a block in one pass "
                                   "from the main model's hidden states at its layers "
                                   + ", ".join(map(str, draft_info.target_layers)) + ")",
               None: ""}[draft_info.drafts_as]
        if result.other_vocabulary:
            from app.core.gguf.shared_vocab import shared_vocabulary

            how = (f" through text ({'; '.join(result.vocabulary_differences)}); "
                   f"{shared_vocabulary(main_info, draft_info).describe()}")
        print(f"compatible: {draft_info.display_name} can draft for {main_info.display_name}{how}")
        return 0
    print(f"incompatible: {draft_info.display_name} cannot draft for {main_info.display_name}:")
    for reason in result.reasons:
        print(f"  - {reason}")
    return 1

