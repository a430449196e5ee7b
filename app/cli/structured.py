"""Structured output on the command line: ``quickdraft generate --grammar FILE`` (a GBNF grammar,
llama.cpp's syntax with the start rule ``root``) or ``--json-schema FILE`` (a JSON Schema, turned into
one by llama-cpp-python's converter). The engine enforces it on the main model's distribution at every
verified position, so the answer is the constrained main model's own, with or without a drafter.

A local thinking model whose template opens its reasoning block gets it closed first (the answer
then starts with the grammar), as the server does; a remote server is sent the grammar and does the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from app.core.chat.reasoning import ThinkingFormat
from app.core.errors import QuickdraftError
from app.core.frontdoor import AnswerEngine, GenerationRequest


def add_structured_args(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--grammar", metavar="FILE",
                       help="a GBNF grammar file (llama.cpp's syntax, start rule 'root') the answer must follow")
    group.add_argument("--json-schema", metavar="FILE",
                       help="a JSON Schema file: the answer is JSON that matches it")


def read_logprobs(args) -> int | None:
    """``--logprobs N``: the JSON summary's ``logprobs`` (each answer token's log-probability under the
    main model, with its N likeliest alternatives); the streamed text has nowhere to show them."""
    if args.logprobs is not None and not args.json:
        raise QuickdraftError("--logprobs goes with --json: the JSON summary lists each token's log-probability")
    return args.logprobs


def read_grammar(args) -> str | None:
    """The GBNF grammar the flags ask for (None: free text). Raises QuickdraftError naming the file
    and what is wrong with it."""
    path = args.grammar or args.json_schema
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QuickdraftError(f"cannot read {path}: {exc}") from None
    if args.grammar:
        if not text.strip():
            raise QuickdraftError(f"{path} is empty: a grammar needs at least the rule 'root ::= ...'.")
        return text
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise QuickdraftError(f"{path} is not JSON: {exc}.") from None
    from app.core.llama.grammar import json_schema_grammar

    return json_schema_grammar({"type": "object"} if schema == {} else schema, f"The JSON Schema in {path}")


def constrained(engine: AnswerEngine, request: GenerationRequest, grammar: str | None,
                thinking: ThinkingFormat | None) -> tuple[GenerationRequest, ThinkingFormat | None]:
    """``request`` following ``grammar`` (unchanged for None), and how its answer marks reasoning:
    a local model's open reasoning block is closed in the prompt first, so its answer has none."""
    if grammar is None:
        return request, thinking
    request = dataclasses.replace(request, grammar=grammar)
    if engine.pair.remote_url is not None or thinking is None or not thinking.starts_open:
        return request, thinking
    prompt = engine.prompt(request.messages, request.template_variables, [(thinking.end + "\n\n", True)])
    return dataclasses.replace(request, prompt=list(prompt.tokens)), None
