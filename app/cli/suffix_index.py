"""``quickdraft suffix-index status|clear|on|off``: the suffix index of past answers and prompts
(app/core/speculation/suffix_store.py), and the ``--suffix-index on|off`` flag of the commands that load
a model, which overrides the setting for that run."""

from __future__ import annotations

import argparse

ACTIONS = ("status", "clear", "on", "off")


def add_suffix_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suffix-index", choices=("on", "off"), default=None,
                   help="draft from the index of past answers and prompts kept for the main model, and feed it "
                        "this run's answers (default: the setting, on unless `quickdraft suffix-index off`; "
                        "bench: off, as the index may hold earlier answers to the prompts it times)")


def suffix_config(args):
    """The run's SuffixConfig (None: off): --suffix-index, else the settings' switch and limit. ``bench``
    reads it only when asked: the index may hold earlier answers to the very prompts it times (its own
    runs feed nothing: app/core/compare.py)."""
    from app.paths import app_paths
    from app.storage.settings import SettingsStore

    paths = app_paths()
    settings = SettingsStore(paths.settings_file).load()
    wanted = getattr(args, "suffix_index", None)
    if wanted is None and getattr(args, "command", None) == "bench":
        return None
    if wanted is not None:
        from dataclasses import replace

        settings = replace(settings, suffix_index=wanted == "on")
    return settings.suffix_config(paths.suffix_index_dir)


def add_suffix_index_parser(sub) -> None:
    p = sub.add_parser("suffix-index", help="the index of past answers and prompts the suffix drafter reads: "
                                            "status, clear, on, off")
    p.add_argument("action", choices=ACTIONS, help="status: what each model's index holds; clear: delete it "
                                                   "(every model's, or -m's); on/off: use it in every run or none")
    p.add_argument("-m", "--main", help="status: check this model's vocabulary against its index; clear: this "
                                        "model's index only")
    p.add_argument("--limit-mb", type=int, default=None, help="also set the most each model's index may take on "
                                                              "disk, in MB (64 by default)")
    p.set_defaults(handler=cmd_suffix_index)


def cmd_suffix_index(args) -> int:
    from dataclasses import replace

    from app.core.errors import QuickdraftError
    from app.paths import app_paths
    from app.storage.settings import LIMITS, SettingsStore

    if args.main and args.action in ("on", "off"):
        raise QuickdraftError(f"`suffix-index {args.action}` applies to every model: -m is for status and clear")
    paths = app_paths()
    store = SettingsStore(paths.settings_file)
    settings = store.load()
    if args.limit_mb is not None:
        low, high = LIMITS["suffix_index_mb"]
        if not low <= args.limit_mb <= high:
            raise QuickdraftError(f"--limit-mb must be between {low} and {high}, not {args.limit_mb}")
        settings = replace(settings, suffix_index_mb=args.limit_mb)
    if args.action in ("on", "off"):
        settings = replace(settings, suffix_index=args.action == "on")
    if args.limit_mb is not None or args.action in ("on", "off"):
        store.save(settings)
    if args.action == "clear":
        _clear(paths.suffix_index_dir, args.main)
    print(f"suffix index: {'on' if settings.suffix_index else 'off'}, at most {settings.suffix_index_mb} MB per "
          f"model, in {paths.suffix_index_dir}")
    if args.action == "status":
        _status(paths.suffix_index_dir, args.main)
    return 0


def _clear(root, main: str | None) -> None:
    from app.core.speculation.suffix_store import clear_indexes, index_key

    key = index_key(main) if main else None
    removed = clear_indexes(root, key)
    what = f"the index of {key}" if key else "every model's index"
    print(f"cleared {what}" if removed else f"nothing to clear ({what} is empty)")


def _status(root, main: str | None) -> None:
    from app.core.gguf.fingerprint import vocabulary_fingerprint
    from app.core.gguf.info import read_gguf_info
    from app.core.speculation.suffix_store import index_key, list_indexes

    fingerprint = vocabulary_fingerprint(read_gguf_info(main)) if main else None
    rows = [s for s in list_indexes(root, fingerprint) if main is None or s.key == index_key(main)]
    if not rows:
        print("no index yet" + (f" for {index_key(main)}" if main else ""))
        return
    print(f"{'model':<40} {'documents':>10} {'tokens':>12} {'MB':>8}  state")
    for s in rows:
        print(f"{s.key:<40} {s.documents:>10} {s.tokens:>12} {s.bytes / 2**20:>8.2f}  {s.problem or 'ok'}")
