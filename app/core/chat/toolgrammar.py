"""The grammar of a forced tool call: ``tool_choice`` "required" (any declared function) or a named
function, in the format the template shows (tools.py), its arguments matching the function's JSON
Schema (llama-cpp-python's converter, app/core/llama/grammar.py).

The call's opening is already in the prompt (a prefill, tools.call_opening: the answer starts as a
call); the grammar covers the text after it: the rest of the opening (a function's name when none is
named), the arguments, the closing, and, with parallel calls in the formats that take several, more
calls. Then only an end-of-generation token is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.core.chat.tools import ToolFormat, call_opening
from app.core.llama.grammar import gbnf_literal, grammar_text, schema_converter, schema_rule

EMPTY_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class CallShape:
    """A call's text: ``head`` NAME ``middle`` ARGUMENTS ``tail``; ``between`` separates further calls
    (None: the format takes one call per answer here). ``xml``: Qwen3-Coder's <parameter=...> arguments."""

    head: str
    middle: str
    tail: str
    between: str | None = None
    xml: bool = False


def call_shape(fmt: ToolFormat, template: str) -> CallShape:
    """How ``fmt`` writes a call (the texts call_opening starts)."""
    if fmt is ToolFormat.HERMES:
        return CallShape('<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>", "\n")
    if fmt is ToolFormat.QWEN3_CODER:
        return CallShape("<tool_call>\n<function=", ">\n", "</function>\n</tool_call>", "\n", xml=True)
    if fmt is ToolFormat.LLAMA3:
        return CallShape('{"name": "', '", "parameters": ', "}")
    if fmt is ToolFormat.MISTRAL:
        if "[ARGS]" in template:
            return CallShape("[TOOL_CALLS]", "[ARGS]", "")
        return CallShape('[TOOL_CALLS][{"name": "', '", "arguments": ', "}]")
    # harmony: the call ends with <|call|>, an end-of-generation token, which the grammar allows at its end
    return CallShape("<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "")


def call_grammar(fmt: ToolFormat, template: str, tools: Sequence[Mapping], name: str | None,
                 parallel: bool) -> str:
    """GBNF for the answer after the forced call's opening (``call_opening(fmt, template, name)``):
    a call of ``name`` (None: of any of ``tools``), arguments per its schema. Raises GrammarError
    naming the tool whose parameters the converter cannot read."""
    shape = call_shape(fmt, template)
    opening = "".join(text for text, _ in call_opening(fmt, template, name))
    converter = schema_converter()
    functions = [t["function"] for t in tools if name is None or t["function"]["name"] == name]
    calls = []
    for i, function in enumerate(functions):
        arguments = _arguments(converter, shape, function, i)
        calls.append((shape.head + function["name"] + shape.middle, f"{arguments} {gbnf_literal(shape.tail)}"
                      if shape.tail else arguments))
    first = " | ".join(_after(opening, start) + rest for start, rest in calls)
    rules = [f"root ::= ( {first} )"]
    if parallel and name is None and shape.between is not None:
        rules[0] += f" ( {gbnf_literal(shape.between)} another-call )*"
        rules.append("another-call ::= " + " | ".join(f"{gbnf_literal(start)} {rest}" for start, rest in calls))
    return "\n".join(rules) + "\n" + grammar_text(converter)


def _after(opening: str, start: str) -> str:
    """The GBNF for what of a call's ``start`` follows the opening in the prompt, with a space after."""
    assert start.startswith(opening), (start, opening)   # the opening is a call's start (tools.call_opening)
    rest = start[len(opening):]
    return f"{gbnf_literal(rest)} " if rest else ""


def _arguments(converter, shape: CallShape, function: Mapping, i: int) -> str:
    parameters = function.get("parameters") or EMPTY_PARAMETERS
    what = f"The parameters of the tool {function['name']!r}"
    if not shape.xml:
        return schema_rule(converter, parameters, f"arguments-{i}", what)
    return _xml_arguments(converter, parameters, i, what)


def _xml_arguments(converter, parameters: Mapping, i: int, what: str) -> str:
    """Qwen3-Coder's arguments: ``<parameter=P>\\nVALUE\\n</parameter>\\n`` for each property in order,
    the required ones always; a string's value is text without '<', any other a JSON value per its schema."""
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    parts = []
    for j, (key, schema) in enumerate(properties.items()):
        if isinstance(schema, Mapping) and schema.get("type", "string") == "string" and "enum" not in schema:
            value = "[^<]*"
        else:
            value = schema_rule(converter, schema, f"arguments-{i}-{j}", f"{what} (property {key!r})")
        part = f"{gbnf_literal(f'<parameter={key}>' + chr(10))} {value} {gbnf_literal(chr(10) + '</parameter>' + chr(10))}"
        parts.append(part if key in required else f"( {part} )?")
    return " ".join(parts) if parts else '""'
