"""The command line's model arguments (-m, -md, -ngl, -c, -t, --device, ...) turned into model
parameters and a loaded engine: shared by the commands in app/cli/commands.py and app/cli/info.py."""

from __future__ import annotations

import sys


def load_engine(args, states=None):
    """The pair the arguments name, loaded, with its warnings on stderr (costs kept in the profiles folder;
    cache states between conversations in ``states``, a StatesConfig, when given; the suffix index as
    --suffix-index or the settings say, for the commands that take the flag)."""
    from app.core.speculation.costmodel import ProfileStore
    from app.cli.suffix_index import suffix_config
    from app.core.engine import Engine
    from app.paths import app_paths

    main, draft = model_params(args)
    engine = Engine.load(main, draft, profile_store=ProfileStore(app_paths().profiles_dir), states=states,
                         suffix=suffix_config(args) if hasattr(args, "suffix_index") else None)
    for warning in engine.pair.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if engine.pair.other_vocabulary is not None:
        print(f"draft of another vocabulary: {engine.pair.other_vocabulary}", file=sys.stderr)
    return engine


def model_params(args):
    """The main model's and the draft's ModelParams from the arguments; InvalidParameterError names a bad one."""
    from app.core.errors import InvalidParameterError
    from app.core.params import ModelParams

    device = args.device or "auto"
    main = ModelParams(args.main, n_gpu_layers=args.gpu_layers, n_ctx=args.ctx, n_threads=args.threads, device=device,
                       use_mmap=args.mmap, chat_template=chat_template_file(getattr(args, "chat_template_file", None)),
                       chat_template_name=chat_template_name(getattr(args, "chat_template", None)))
    if not args.draft:
        return main, None
    try:
        return main, ModelParams(args.draft, n_gpu_layers=args.gpu_layers_draft, n_ctx=args.ctx_draft or args.ctx,
                                 n_threads=args.threads_draft or args.threads, device=device, use_mmap=args.mmap)
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"draft {exc.name}", exc.problem) from None


def add_chat_template_arg(p) -> None:
    template = p.add_mutually_exclusive_group()
    template.add_argument("--chat-template-file", metavar="FILE",
                          help="a Jinja chat template to use instead of the main model's own (as llama-server's)")
    template.add_argument("--chat-template", metavar="NAME",
                          help="one of llama.cpp's built-in templates instead (chatml, llama3, mistral-v7, ...)")


def chat_template_name(name: str | None) -> str | None:
    """``--chat-template NAME``, checked against llama.cpp's names."""
    from app.core.errors import InvalidParameterError
    from app.core.llama import named_templates

    if name and name not in named_templates.names():
        raise InvalidParameterError("--chat-template", f"{name!r} is not one of llama.cpp's built-in templates "
                                    f"({', '.join(named_templates.names())})")
    return name or None


def chat_template_file(path: str | None) -> str | None:
    """The text of ``--chat-template-file``; a file that cannot be read is named with the reason."""
    from app.core.params import read_chat_template

    return read_chat_template(path, "--chat-template-file") if path else None
