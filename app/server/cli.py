"""``quickdraft serve``: its options and its run (imports the HTTP stack only when serving)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

API_KEY_ENV = "QUICKDRAFT_API_KEY"
MAX_PARALLEL = 64   # slots: each holds a KV cache of its context
AUTO_PARALLEL = 4   # slots when --parallel is not given
MAX_BATCH = 65536   # --batch-size: a prompt's tokens read per step
SLOT_CONTEXT_STEP = 256   # a divided context is rounded up to this, as llama.cpp rounds n_ctx_seq


def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (127.0.0.1), or several, comma-separated; any but loopback needs --api-key")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (8080; 0 = any free port)")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"require 'Authorization: Bearer KEY' on every route but /health (or set {API_KEY_ENV})")
    p.add_argument("--parallel", "-np", type=int, default=None,
                   help=f"requests answered at once, each in a slot with its own cache and drafting; the slots are "
                        f"made as the server starts, as many as fit. Unset: {AUTO_PARALLEL} (as LM Studio), each slot "
                        f"may hold the whole --ctx; given: --ctx is divided among them (as llama-server)")
    p.add_argument("--kv-unified", "-kvu", dest="kv_unified", action="store_true", default=None,
                   help="each slot may hold the whole --ctx, even with --parallel given")
    p.add_argument("--no-kv-unified", "-no-kvu", dest="kv_unified", action="store_false",
                   help="--ctx is divided among the slots, even with --parallel unset")
    p.add_argument("--batch-size", "-b", dest="batch_size", type=int, default=None,
                   help="a long prompt's tokens read per step (512 with one slot; 128 beside others, since each step "
                        "of a slot reading a prompt is one the others wait for)")
    p.add_argument("--cont-batching", "-cb", dest="cont_batching", action="store_true", default=True,
                   help="the slots' verify batches are decoded together, one pass over the weights for all (default)")
    p.add_argument("--no-cont-batching", "-nocb", dest="cont_batching", action="store_false",
                   help="each slot decodes alone, the slots taking turns")
    p.add_argument("--reasoning", "-rea", choices=("on", "off", "auto"), default="auto",
                   help="thinking models think (on, or auto: the default, as llama-server) or not (off) unless a "
                        "request says")
    p.add_argument("--chat-template-kwargs", metavar="JSON",
                   help="names every request's chat template reads unless the request sets them, as a JSON object")
    sampling = p.add_argument_group("sampling of requests that set none (as llama-server's)")
    sampling.add_argument("--temp", dest="temperature", type=float, help="temperature (0.8)")
    sampling.add_argument("--top-k", dest="top_k", type=int, help="top-k (40; 0 = off)")
    sampling.add_argument("--top-p", dest="top_p", type=float, help="top-p (0.95)")
    sampling.add_argument("--min-p", dest="min_p", type=float, help="min-p (0.05)")
    sampling.add_argument("--seed", "-s", dest="seed", type=int, help="random seed (-1: a fresh one each request)")
    sampling.add_argument("--n-predict", "-n", dest="n_predict", type=int,
                          help="most tokens an answer may have (-1: until the context is full, the default)")
    p.add_argument("--queue", type=int, default=8,
                   help="requests that may wait while all slots answer; more get 429 with Retry-After (8)")
    p.add_argument("--log-requests", action="store_true", help="print one line per HTTP request")
    p.add_argument("--verbose", action="store_true",
                   help="every OpenAI answer also carries llama-server's __verbose (the prompt as text, the native "
                        "body); a request asks for it alone with \"verbose\": true")
    p.add_argument("--state-cache-mb", type=int, default=2048,
                   help="disk kept for the caches of conversations left, so that a client coming back reads "
                        "only its new message (2048; 0 = none)")
    p.add_argument("--alias", "-a", help="the model's names, comma-separated: /v1/models lists them and names it by the "
                   "first in sorted order, as llama-server does (default: the main file's name)")
    p.add_argument("--tags", help="tags listed with the model in /v1/models, comma-separated (informational)")
    p.add_argument("--slots", action=argparse.BooleanOptionalAction, default=True,
                   help="GET /slots shows each slot's state (default); --no-slots answers it with 501")
    p.add_argument("--metrics", action=argparse.BooleanOptionalAction, default=True,
                   help="GET /metrics in Prometheus text (default); --no-metrics answers it with 501")
    p.add_argument("--ui", action=argparse.BooleanOptionalAction, default=True,
                   help="a chat page at / (default); --no-ui leaves it out")
    p.add_argument("--slot-save-path", metavar="DIR",
                   help="a folder where POST /slots/{id}?action=save writes a slot's cache to a file and "
                        "?action=restore reads one back, as llama-server (default: none; the actions answer 501)")
    p.add_argument("--cors-origins", help="origins a browser may call from: * (any), localhost, or a comma-separated "
                   "list (default: * with --api-key, else localhost)")


def states_config(args):
    """Where the server keeps its clients' conversations' cache states, and how much (--state-cache-mb)."""
    from app.core.params import StatesConfig
    from app.paths import app_paths

    return StatesConfig(app_paths().states_dir, max(0, args.state_cache_mb) << 20)


def divide_context(args) -> None:
    """Set ``args.parallel`` and each slot's context, llama-server's rule: with ``--parallel`` given
    the context (``--ctx``, and the draft's) is the slots' together, each slot holding its share
    rounded up to 256 tokens (llama.cpp's n_ctx_seq), so ``-c 8192 -np 4`` holds what llama-server
    holds; left unset, each of 4 slots may hold the whole context (llama-server's auto slots, whose
    cache is unified). ``--kv-unified`` / ``--no-kv-unified`` choose either way."""
    from app.core.errors import QuickdraftError

    given = args.parallel is not None
    args.parallel = args.parallel if given else AUTO_PARALLEL
    if not 1 <= args.parallel <= MAX_PARALLEL:
        raise QuickdraftError(f"--parallel must be between 1 and {MAX_PARALLEL}, not {args.parallel}")
    unified = args.kv_unified if args.kv_unified is not None else not given
    if not unified:
        args.ctx = _share(args.ctx, args.parallel)
        args.ctx_draft = _share(args.ctx_draft, args.parallel) if args.ctx_draft else None


def checked_defaults(args) -> dict:
    """serve's sampling flags as the body fields they default, checked as a request's would be."""
    from app.core.errors import QuickdraftError
    from app.server.api import sampling_from
    from app.server.errors import ApiError
    from app.server.options import DEFAULT_FLAGS, request_defaults

    defaults = request_defaults(args)
    try:
        sampling_from(dict(defaults))
    except ApiError as exc:
        flag = DEFAULT_FLAGS.get(exc.param or "", "a sampling flag")
        raise QuickdraftError(f"{flag}: {exc.message}") from None
    return defaults


def _share(n_ctx: int, slots: int) -> int:
    return -(-(n_ctx // slots) // SLOT_CONTEXT_STEP) * SLOT_CONTEXT_STEP


def serve(args, load_engine: Callable[[], object], speculation, drafter) -> int:
    """Serve the pair ``load_engine`` loads (on the engine's thread) with ``drafter`` (a DrafterKind)."""
    from app.core.errors import QuickdraftError

    from app.server.api import template_defaults
    from app.server.options import ServerOptions
    from app.server.run import LocalServer
    from app.server.slots import ThreadedJobs

    if not 0 <= args.port <= 65535:
        raise QuickdraftError(f"--port must be between 0 and 65535, not {args.port}")
    if args.queue < 0:
        raise QuickdraftError(f"--queue must not be negative, not {args.queue}")
    divide_context(args)
    if args.batch_size is not None and not 1 <= args.batch_size <= MAX_BATCH:
        raise QuickdraftError(f"--batch-size must be between 1 and {MAX_BATCH}, not {args.batch_size}")
    jobs = ThreadedJobs(load_engine, speculation, drafter, max_waiting=args.queue, parallel=args.parallel,
                        merge=args.cont_batching, read_chunk=args.batch_size)
    try:
        jobs.template_defaults = template_defaults(args.chat_template_kwargs, args.reasoning)
    except ValueError as exc:
        raise QuickdraftError(str(exc)) from None
    jobs.verbose = args.verbose
    if args.slot_save_path is not None and not os.path.isdir(args.slot_save_path):
        raise QuickdraftError(f"--slot-save-path: not a directory: {args.slot_save_path}")
    # bind before loading, so a taken port or a wrong address fails before minutes of loading
    options = ServerOptions(api_key=args.api_key, aliases=args.alias, tags=args.tags, cors_origins=args.cors_origins,
                            slots_endpoint=args.slots, metrics_endpoint=args.metrics, web_ui=args.ui,
                            request_defaults=checked_defaults(args),
                            slot_save_path=os.path.abspath(args.slot_save_path) if args.slot_save_path else None)
    server = LocalServer(jobs, args.host, args.port, options, access_log=args.log_requests)
    try:
        pair = jobs.start()
        draft = f" drafting with {pair.draft_file}" if pair.draft_file else ""
        page = f"; chat page at {server.url}/" if args.ui else ""
        merged = ", their verify batches decoded together" if jobs.shares_context else ""
        print(f"serving {options.model_id or pair.model_id}{draft} (context {pair.n_ctx} a slot, {jobs.parallel} at once"
              f"{merged}) at {server.url}/v1{page} -- Ctrl-C stops",
              file=sys.stderr, flush=True)
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down: a normal stop
        pass
    finally:
        jobs.stop()
        server.close()
    return 0
