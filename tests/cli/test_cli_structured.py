"""``quickdraft generate --grammar FILE`` and ``--json-schema FILE``: the answer follows the grammar with
any drafter; a thinking model's open block is closed first; bad files are one error line naming them."""

from __future__ import annotations

import json

import pytest

from app.core.gguf.tiny import THINKING_SPEC, write_tiny_model
from tests.cli.test_cli import quickdraft

SCHEMA = {"type": "object", "properties": {"word": {"type": "string", "pattern": "^[a-z]{1,8}$"},
                                           "yes": {"type": "boolean"}}, "required": ["word", "yes"]}


@pytest.fixture
def schema_file(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    return path


@pytest.mark.parametrize("drafter, temp", [("none", "0"), ("model", "0"), ("lookup", "0.9"), ("model", "0.9")])
def test_json_schema_gives_json_that_matches_it(tiny_models, tmp_path, schema_file, drafter, temp):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-md", str(tiny_models.other), "-p", "the cat",
                   "-n", "200", "--drafter", drafter, "--temp", temp, "--seed", "4", "--json-schema", str(schema_file),
                   "--json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["stop_reason"] == "eog", summary["text"]
    value = json.loads(summary["text"])
    assert set(value) == {"word", "yes"} and isinstance(value["yes"], bool) and value["word"].isalpha()


def test_a_grammar_file_is_followed_and_greedy_answers_agree_across_drafters(tiny_models, tmp_path):
    grammar = tmp_path / "abc.gbnf"
    grammar.write_text('root ::= ("a" | "b" | "c")+ "."\n', encoding="utf-8")
    texts = set()
    for drafter in ("none", "model", "lookup"):
        r = quickdraft("generate", "-m", str(tiny_models.main), "-md", str(tiny_models.other), "-p", "the cat",
                       "-n", "30", "--drafter", drafter, "--grammar", str(grammar), "--json", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        text = json.loads(r.stdout)["text"]
        assert set(text.rstrip(".")) <= set("abc")
        texts.add(text)
    assert len(texts) == 1


def test_a_thinking_models_open_block_is_closed_before_the_grammar(tmp_path, schema_file):
    model = write_tiny_model(tmp_path / "thinking.gguf", THINKING_SPEC)
    r = quickdraft("generate", "-m", str(model), "-p", "hello", "-n", "200", "--drafter", "lookup",
                   "--json-schema", str(schema_file), "--json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["reasoning"] in ("", None) and json.loads(summary["answer"])["word"]


@pytest.mark.parametrize("flag, content, words", [
    ("--grammar", 'root ::= ("a"', "not valid GBNF"),
    ("--grammar", "", "is empty"),
    ("--json-schema", "{not json", "is not JSON"),
    ("--json-schema", '{"type": "hiccup"}', "cannot be turned into a grammar"),
])
def test_a_bad_file_is_one_error_line_naming_the_problem(tiny_models, tmp_path, flag, content, words):
    path = tmp_path / "bad.txt"
    path.write_text(content, encoding="utf-8")
    r = quickdraft("generate", "-m", str(tiny_models.main), "-p", "x", "-n", "4", flag, str(path), tmp_path=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error:") and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_grammar_and_json_schema_together_are_refused(tiny_models, tmp_path, schema_file):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-p", "x", "--grammar", str(schema_file),
                   "--json-schema", str(schema_file), tmp_path=tmp_path)
    assert r.returncode == 1 and "not allowed with argument" in r.stderr
