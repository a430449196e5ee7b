"""``quickdraft models ...``: search, files, download, import, list, rm, pairs: the model manager headless.

Wired into app/cli/commands.py with ``add_models_parser(subparsers)``; ``run_models_command(args)``
returns the exit code and prints a one-line ``error: ...`` for anything a user can cause.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TextIO

from app.core.errors import QuickdraftError

DEFAULT_CTX = 4096


def add_models_parser(subparsers) -> argparse.ArgumentParser:
    models = subparsers.add_parser("models", help="search, download, import and pair GGUF models")
    models.set_defaults(handler=run_models_command, models_command=None)
    sub = models.add_subparsers(dest="models_command", metavar="ACTION")

    search = sub.add_parser("search", help="search Hugging Face for GGUF repositories (most downloaded first)")
    search.add_argument("query", nargs="+")
    search.add_argument("--limit", type=int, default=20)
    _hub_args(search)

    files = sub.add_parser("files", help="list a repository's GGUF files with size and quantization")
    files.add_argument("repo", help="owner/name, e.g. bartowski/Qwen2.5-Coder-7B-Instruct-GGUF")
    files.add_argument("--revision", default="main")
    files.add_argument("--card", action="store_true", help="also print the model card's summary")
    _hub_args(files)

    download = sub.add_parser("download", help="download (or resume) a GGUF file, or a recommended pair")
    download.add_argument("repo", nargs="?", help="owner/name")
    download.add_argument("file", nargs="?", help="a GGUF file name from `models files REPO`")
    download.add_argument("--pair", metavar="ID", help="download a recommended pair (see `models pairs`)")
    download.add_argument("--revision", default="main")
    _hub_args(download)

    imp = sub.add_parser("import", help="add GGUF files from disk, or the Hugging Face cache's")
    imp.add_argument("paths", nargs="*", help="GGUF files")
    imp.add_argument("--link", action="store_true", help="link instead of copying")
    imp.add_argument("--hf-cache", action="store_true", help="list the GGUF models in the Hugging Face cache")

    lst = sub.add_parser("list", help="installed models with their metadata and memory needs")
    lst.add_argument("--ctx", type=int, default=DEFAULT_CTX, help=f"context for the memory estimate ({DEFAULT_CTX})")

    rm = sub.add_parser("rm", help="delete an installed model")
    rm.add_argument("model", help="file name (or a unique part of it) or path")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")

    pairs = sub.add_parser("pairs", help="compatible drafts for MAIN, or the recommended pairs without MAIN")
    pairs.add_argument("main", nargs="?", help="an installed main model (file name or path)")
    pairs.add_argument("--ctx", type=int, default=DEFAULT_CTX)
    return models


def _hub_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", help="Hugging Face endpoint (default: $HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--token", help="Hugging Face token for gated models (default: $HF_TOKEN or `hf auth login`)")


def run_models_command(args: argparse.Namespace) -> int:
    action = getattr(args, "models_command", None)
    if not action:
        print("usage: quickdraft models {search,files,download,import,list,rm,pairs} ...", file=sys.stderr)
        return 2
    try:
        return _ACTIONS[action](args)
    except QuickdraftError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


# --- actions -----------------------------------------------------------------------------------------

def _search(args) -> int:
    results = _client(args).search(" ".join(args.query), limit=args.limit)
    if not results:
        print("No GGUF repositories found.")
        return 0
    rows = [(r.repo_id, f"{r.downloads:,}", f"{r.likes:,}", "gated" if r.gated else "") for r in results]
    _table(("repository", "downloads", "likes", ""), rows)
    return 0


def _files(args) -> int:
    from app.models.diskspace import format_bytes

    client = _client(args)
    models = client.list_models(args.repo, args.revision)
    if args.card:
        summary = client.card_summary(args.repo, args.revision)
        print((summary or "(no model card)") + "\n")
    if not models:
        print(f"{args.repo} has no GGUF files.")
        return 0
    _table(("file", "size", "quant", "parts"),
           [(m.filename, format_bytes(m.size), m.quantization, str(len(m.parts))) for m in models])
    return 0


def _download(args) -> int:
    from app.models.catalog import find_pair, load_catalog

    client = _client(args)
    if args.pair:
        pair = find_pair(load_catalog(), args.pair)
        wanted = [(pair.main.repo_id, pair.main.filename), (pair.draft.repo_id, pair.draft.filename)]
    elif args.repo and args.file:
        wanted = [(args.repo, args.file)]
    else:
        raise QuickdraftError("Name a repository and a file (see `quickdraft models files REPO`), "
                              "or a recommended pair with --pair ID (see `quickdraft models pairs`).")
    try:
        paths = [_download_one(client, client.resolve(repo, name, args.revision)) for repo, name in wanted]
    except KeyboardInterrupt:
        print("\nDownload paused; run the same command to resume.", file=sys.stderr)
        return 130
    for path in paths:
        print(path)
    return 0


def _download_one(client, model) -> Path:
    from app.models.download import download_model, local_path, pending_downloads
    from app.models.diskspace import format_bytes

    models_dir = _paths().models_dir
    existing = local_path(models_dir, model.repo_id, model.filename)
    if existing.exists():
        print(f"{model.label} is already downloaded.", file=sys.stderr)
        return existing
    paused = next((p for p in pending_downloads(models_dir) if p.key == f"{model.repo_id}/{model.filename}"), None)
    verb = f"Resuming at {format_bytes(paused.done)}:" if paused and paused.done else "Downloading"
    print(f"{verb} {model.repo_id}/{model.label} ({format_bytes(model.size)})", file=sys.stderr)
    try:
        return asyncio.run(download_model(client, model, models_dir, _ProgressLine(sys.stderr)))
    finally:
        print(file=sys.stderr)   # end the progress line, so a message after it has a line of its own


class _ProgressLine:
    def __init__(self, stream: TextIO):
        self.stream = stream

    def __call__(self, progress) -> None:
        bar_width = 30
        filled = int(bar_width * progress.fraction)
        line = f"\r[{'#' * filled}{'.' * (bar_width - filled)}] {progress.fraction:6.1%} {progress.describe()}"
        self.stream.write(line.ljust(100))
        self.stream.flush()


def _import(args) -> int:
    from app.models.registry import ModelRegistry, find_hf_cache_models

    registry = ModelRegistry(_paths().models_dir)
    if not args.paths and not args.hf_cache:
        raise QuickdraftError("Name GGUF files to import, or use --hf-cache.")
    for path in args.paths:
        model = registry.import_file(path, "link" if args.link else "copy")
        print(f"{'Linked' if args.link else 'Copied'} {model.name} -> {model.path}")
    if args.hf_cache:
        cached = find_hf_cache_models()
        for item in cached:
            registry.add_external(item.path, "hf-cache", item.repo_id)
            print(f"Listed {item.repo_id}/{item.path.name} from the Hugging Face cache")
        if not cached:
            print("The Hugging Face cache holds no GGUF models.")
    return 0


def _list(args) -> int:
    from app.models.diskspace import format_bytes, format_params
    from app.models.memory import estimate_memory, judge_fit, machine_memory
    from app.models.registry import ModelRegistry

    registry = ModelRegistry(_paths().models_dir)
    models = registry.list()
    machine = machine_memory()
    if not models:
        print(f"No models installed in {registry.models_dir}. Try: quickdraft models search qwen2.5 coder")
        _print_paused_downloads(registry.models_dir)
        return 0
    rows = []
    for m in models:
        if m.info is None:
            rows.append((m.name, "-", "-", "-", format_bytes(m.size), "-", "-", "-", f"error: {m.error}"))
            continue
        i = m.info
        fit = judge_fit(estimate_memory(i, args.ctx, m.size).total, machine)
        rows.append((m.name, i.architecture, format_params(i.parameter_count), i.quantization, format_bytes(m.size),
                     f"{i.context_length or '?'}", f"{i.vocab_type_name} {i.vocab_size:,}",
                     "yes" if i.chat_template else "no", fit.verdict))
    _table(("model", "arch", "params", "quant", "size", "ctx", "vocabulary", "template", f"memory@{args.ctx}"),
           rows)
    print(f"\n{len(models)} models, {format_bytes(registry.total_disk_used())} in {registry.models_dir}")
    print(machine.describe())
    _print_paused_downloads(registry.models_dir)
    return 0


def _print_paused_downloads(models_dir: Path) -> None:
    from app.models.diskspace import format_bytes
    from app.models.download import pending_downloads

    for p in pending_downloads(models_dir):
        print(f"paused download: {p.model.repo_id} {p.model.filename} at {format_bytes(p.done)} of "
              f"{format_bytes(p.model.size)}; resume with: quickdraft models download {p.model.repo_id} "
              f"{p.model.filename}")


def _rm(args) -> int:
    from app.models.registry import ModelRegistry

    registry = ModelRegistry(_paths().models_dir)
    model = registry.find(args.model)
    if not args.yes:
        if not sys.stdin.isatty():
            raise QuickdraftError(f"Deleting {model.name} needs confirmation: add --yes.")
        answer = input(f"Delete {model.path}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("Nothing deleted.")
            return 1
    print(registry.remove(model.path))
    return 0


def _pairs(args) -> int:
    if not args.main:
        return _catalog()
    from app.models.diskspace import format_bytes
    from app.models.memory import estimate_memory, judge_fit, machine_memory
    from app.models.pairing import rank_drafts
    from app.models.registry import ModelRegistry

    registry = ModelRegistry(_paths().models_dir)
    main = registry.find(args.main)
    if main.info is None:
        raise QuickdraftError(f"{main.name} cannot be used: {main.error}")
    result = rank_drafts(main, registry.list())
    machine = machine_memory()
    main_mem = estimate_memory(main.info, args.ctx, main.size)
    print(f"Drafts for {main.name}:")
    if not result.compatible:
        print("  none installed: download a small model of the same family (see `quickdraft models pairs`)")
    for rank, c in enumerate(result.compatible, 1):
        total = main_mem + estimate_memory(c.model.info, args.ctx, c.model.size)
        fit = judge_fit(total.total, machine)
        print(f"  {rank}. {c.model.name} ({format_bytes(c.model.size)}): {c.reason()}; "
              f"pair needs {format_bytes(total.total)}: {fit.verdict}")
    if result.incompatible:
        print("Incompatible:")
        for c in result.incompatible:
            print(f"  - {c.model.name}: {c.reason()}")
    return 0


def _catalog() -> int:
    from app.models.catalog import load_catalog
    from app.models.memory import judge_fit, machine_memory
    from app.models.registry import ModelRegistry

    machine = machine_memory()
    models_dir = _paths().models_dir
    installed = ModelRegistry(models_dir).list()
    rows = []
    for p in load_catalog():
        have = [p.main.find_installed(models_dir, installed), p.draft.find_installed(models_dir, installed)]
        state = "installed" if all(have) else "main only" if have[0] else "draft only" if have[1] else ""
        rows.append((p.id, p.title, f"{p.expected_memory_gb:.1f} GB", judge_fit(p.expected_memory, machine).verdict,
                     state))
    _table(("id", "recommended pair", "memory", "here", "installed"), rows)
    print("\nDownload one with: quickdraft models download --pair ID")
    return 0


_ACTIONS = {"search": _search, "files": _files, "download": _download, "import": _import, "list": _list,
            "rm": _rm, "pairs": _pairs}


# --- helpers -------------------------------------------------------------------------------------------

def _client(args):
    from app.models.hub import HubClient

    return HubClient(endpoint=getattr(args, "endpoint", None), token=getattr(args, "token", None))


def _paths():
    from app.paths import app_paths

    return app_paths().ensure()


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())
