"""The grammar of a forced call, per tool-call format: after the call's opening (the prefill) it takes a
declared function's call with arguments its schema allows, and what the format's reader reads back
as that call; it refuses an undeclared function and arguments off the schema. llama.cpp's grammar
sampler on a tiny model's vocabulary does the checking."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.core.chat.toolcalls import ToolCallStream
from app.core.chat.toolgrammar import call_grammar
from app.core.chat.tools import ToolFormat, call_opening, tool_format
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.binding import LlamaModel
from app.core.llama.grammar import GrammarError, TokenGrammar, json_schema_grammar
from app.core.params import ModelParams

TEMPLATES = Path(__file__).parent / "templates"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["location"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time"}}
# template -> (a call of get_weather as the format writes it, what an undeclared function's call looks like)
CALLS = {
    "Qwen-Qwen2.5-7B-Instruct.jinja":
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris", "days": 2}}\n</tool_call>',
    "Qwen3-Coder.jinja":
        "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": '{"name": "get_weather", "parameters": {"location": "Paris", "days": 2}}',
    "mistralai-Mistral-Nemo-Instruct-2407.jinja":
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris", "days": 2}}]',
    "unsloth-mistral-Devstral-Small-2507.jinja": '[TOOL_CALLS]get_weather[ARGS]{"location": "Paris", "days": 2}',
    "openai-gpt-oss-120b.jinja":
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location": "Paris", "days": 2}',
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("grammar") / "m.gguf", TinySpec(seed=0))
    m = LlamaModel(ModelParams(str(path), n_ctx=256))
    yield m
    m.close()


def byte_tokens(model, text: str) -> list[int]:
    """``text`` as the tiny vocabulary's byte tokens, one per byte (tokenizing would add SentencePiece's
    leading space)."""
    ids = {model.token_text(t): t for t in range(model.n_vocab)}
    return [ids[f"<0x{b:02X}>"] for b in text.encode("utf-8")]


def takes(model, gbnf: str, text: str) -> bool:
    """Whether the grammar takes ``text`` whole (token by token, as the loop feeds it) and may end there."""
    grammar = TokenGrammar(model, gbnf)
    try:
        for token in byte_tokens(model, text):
            if not grammar.allows(token):
                return False
            grammar.accept(token)
        return grammar.allows(model.eos)
    finally:
        grammar.close()


@pytest.mark.parametrize("name", list(CALLS))
@pytest.mark.parametrize("named", [False, True])
def test_the_forced_call_grammar_takes_a_declared_call_and_its_reader_reads_it(model, name, named):
    template = (TEMPLATES / name).read_text(encoding="utf-8")
    fmt = tool_format(template)
    choice = "get_weather" if named else None
    opening = "".join(text for text, _ in call_opening(fmt, template, choice))
    call = CALLS[name]
    assert call.startswith(opening)
    gbnf = call_grammar(fmt, template, [WEATHER, CLOCK], choice, parallel=True)
    assert takes(model, gbnf, call[len(opening):])
    stream = ToolCallStream(fmt, [WEATHER, CLOCK], True)
    stream.feed(call)
    stream.finish()
    (read,) = stream.calls
    assert read.name == "get_weather" and json.loads(read.arguments) == {"location": "Paris", "days": 2}
    # an undeclared function, and arguments off the schema (days is an integer), are refused
    assert not takes(model, gbnf, call.replace("get_weather", "get_wether")[len(opening):])
    assert not takes(model, gbnf, call.replace("2", "two")[len(opening):])


def test_parallel_calls_where_the_format_takes_several(model):
    template = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    two = CALLS["Qwen-Qwen2.5-7B-Instruct.jinja"] + "\n" + '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    opening = "".join(text for text, _ in call_opening(ToolFormat.HERMES, template))
    assert takes(model, call_grammar(ToolFormat.HERMES, template, [WEATHER, CLOCK], None, True), two[len(opening):])
    assert not takes(model, call_grammar(ToolFormat.HERMES, template, [WEATHER, CLOCK], None, False), two[len(opening):])


def test_json_strings_hold_no_control_characters_and_ends_wait_for_the_grammar(model):
    gbnf = json_schema_grammar({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})
    assert takes(model, gbnf, '{"a": "x y"}')
    assert not takes(model, gbnf, '{"a": "x\ty"}')   # JSON forbids a raw tab in a string
    assert not takes(model, gbnf, '{"a": "x"')       # not complete: no end of generation yet


def test_a_grammar_state_is_copied_and_advanced_only_by_accept(model):
    grammar = TokenGrammar(model, 'root ::= "ab" | "ac"')
    a, b, c = byte_tokens(model, "abc")
    ids = np.array([a, b, c], dtype=np.int32)
    assert grammar.allowed(ids).tolist() == [True, False, False]
    copy = grammar.clone()
    copy.accept(a)
    assert copy.allowed(ids).tolist() == [False, True, True] and grammar.allowed(ids).tolist() == [True, False, False]
    copy.close()
    grammar.close()


@pytest.mark.parametrize("gbnf, words", [
    ('root ::= ("a"', "expecting ')' at the end of the grammar"),
    ('start ::= "a"', "does not contain a 'root' symbol"),
    ('root ::= root "a"', "left recursion"),
    ('root ::= missing', "Undefined rule identifier 'missing'"),
    ("   ", "empty"),
])
def test_a_grammar_llama_cpp_refuses_is_an_error_naming_why(model, gbnf, words):
    with pytest.raises(GrammarError, match=words.replace("(", r"\(").replace(")", r"\)")):
        TokenGrammar(model, gbnf)


@pytest.mark.parametrize("schema, words", [
    ({"type": "hiccup"}, "Unrecognized schema"),
    ({"$ref": "#/$defs/missing"}, "cannot be turned into a grammar"),
    (12, "must be a JSON object"),
])
def test_a_schema_the_converter_cannot_read_is_an_error_naming_it(schema, words):
    with pytest.raises(GrammarError, match=words.replace("$", r"\$")):
        json_schema_grammar(schema, "The schema")
