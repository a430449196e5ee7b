"""``quickdraft serve``: its options and its run (imports the HTTP stack only when serving)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

API_KEY_ENV = "QUICKDRAFT_API_KEY"
MAX_PARALLEL = 64   # slots: each holds a KV cache of the whole context


def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (127.0.0.1), or several, comma-separated; any but loopback needs --api-key")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (8080; 0 = any free port)")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"require 'Authorization: Bearer KEY' on every route but /health (or set {API_KEY_ENV})")
    p.add_argument("--parallel", "-np", type=int, default=4,
                   help="requests answered at once, each in a slot with its own cache and drafting (4, as LM "
                        "Studio); the slots are made as the server starts, as many as fit")
    p.add_argument("--cont-batching", "-cb", dest="cont_batching", action="store_true", default=True,
                   help="the slots' verify batches are decoded together, one pass over the weights for all (default)")
    p.add_argument("--no-cont-batching", "-nocb", dest="cont_batching", action="store_false",
                   help="each slot decodes alone, the slots taking turns")
    p.add_argument("--reasoning", "-rea", choices=("on", "off", "auto"), default="auto",
                   help="thinking models think (on, or auto: the default, as llama-server) or not (off) unless a "
                        "request says")
    p.add_argument("--chat-template-kwargs", metavar="JSON",
                   help="names every request's chat template reads unless the request sets them, as a JSON object")
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
    if not 1 <= args.parallel <= MAX_PARALLEL:
        raise QuickdraftError(f"--parallel must be between 1 and {MAX_PARALLEL}, not {args.parallel}")
    jobs = ThreadedJobs(load_engine, speculation, drafter, max_waiting=args.queue, parallel=args.parallel,
                        merge=args.cont_batching)
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
                            slot_save_path=os.path.abspath(args.slot_save_path) if args.slot_save_path else None)
    server = LocalServer(jobs, args.host, args.port, options, access_log=args.log_requests)
    try:
        pair = jobs.start()
        draft = f" drafting with {pair.draft_file}" if pair.draft_file else ""
        page = f"; chat page at {server.url}/" if args.ui else ""
        merged = ", their verify batches decoded together" if jobs.shares_context else ""
        print(f"serving {options.model_id or pair.model_id}{draft} (context {pair.n_ctx}, {jobs.parallel} at once"
              f"{merged}) at {server.url}/v1{page} -- Ctrl-C stops",
              file=sys.stderr, flush=True)
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down: a normal stop
        pass
    finally:
        jobs.stop()
        server.close()
    return 0
