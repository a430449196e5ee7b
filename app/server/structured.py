"""Structured output asked in a body: OpenAI's ``response_format`` (``json_object``, ``json_schema``) and
llama-server's ``grammar`` (GBNF) and ``json_schema``, as one GBNF grammar for the engine (a JSON
Schema through llama-cpp-python's converter, app/core/llama/grammar.py). Runs where bodies are parsed,
off the event loop (app.py hands parsing to a thread): a large schema takes a while to convert.

llama-server's rules: ``grammar`` and ``json_schema`` together are an error; ``response_format``'s
schema is used where it gives one; an empty schema means any JSON object. Whether a GBNF grammar
parses is llama.cpp's to say, on the engine's thread (a 400 naming the problem, worker.py).
"""

from __future__ import annotations

from typing import Any

from app.core.llama.grammar import GrammarError, json_schema_grammar
from app.server.errors import ApiError

FORMAT_TYPES = ("text", "json_object", "json_schema")


def grammar_from(body: dict) -> str | None:
    """The GBNF grammar the body's fields ask the answer to follow; None: free text."""
    grammar = body.get("grammar")
    if grammar is not None and not isinstance(grammar, str):
        raise ApiError(400, f"'grammar' must be a string of GBNF rules; got {type(grammar).__name__}.", param="grammar")
    schema, param = _schema(body)
    if grammar and schema is not None:
        raise ApiError(400, "Give 'grammar' or a JSON schema ('json_schema', 'response_format'), not both.",
                       param="grammar")
    if grammar:
        return grammar
    if schema is None:
        return None
    try:
        return json_schema_grammar(_any_object(schema), f"'{param}'")
    except GrammarError as exc:
        raise ApiError(400, str(exc), param=param.split(".")[0]) from None


def response_schema(body: dict) -> dict | None:
    """The JSON Schema the body's fields ask the answer to follow (an empty one: any JSON object);
    None for none or for a GBNF grammar. Call after ``grammar_from``, which checks the fields."""
    schema = None if body.get("grammar") else _schema(body)[0]
    return None if schema is None else _any_object(schema)


def _any_object(schema):
    """llama-server's rule: an empty schema means any JSON object."""
    return {"type": "object"} if schema == {} else schema


def _schema(body: dict) -> tuple[Any, str]:
    """(the JSON Schema asked for, None for none; the field that gave it)."""
    schema, param = body.get("json_schema"), "json_schema"
    response_format = body.get("response_format")
    if response_format is None:
        return schema, param
    if not isinstance(response_format, dict):
        raise ApiError(400, "'response_format' must be an object such as {\"type\": \"json_object\"}.",
                       param="response_format")
    kind = response_format.get("type")
    if kind not in FORMAT_TYPES:
        raise ApiError(400, f"'response_format.type' must be one of {', '.join(FORMAT_TYPES)}; got {kind!r:.40}.",
                       param="response_format")
    if kind == "json_object" and ("schema" in response_format or schema is None):
        return response_format.get("schema", {}), "response_format.schema"
    if kind == "json_schema":
        wrapper = response_format.get("json_schema")
        if wrapper is not None and not isinstance(wrapper, dict):
            raise ApiError(400, "'response_format.json_schema' must be an object {\"name\": ..., \"schema\": {...}}.",
                           param="response_format")
        return (wrapper or {}).get("schema", {}), "response_format.json_schema.schema"
    return schema, param
