"""Thinking models on the command line: the reasoning printed apart (dimmed on a terminal, after
"Thinking: " elsewhere) or hidden, --think/--no-think through the template's switch, --json with the
reasoning and the answer apart, and each part's numbers in the statistics block."""

from __future__ import annotations

import io
import json

import pytest

from app.cli.thinking import DIM, RESET, ReasoningPrinter, format_parts, thinking_setup
from app.core.chat.reasoning import ThinkingFormat, split_reasoning
from app.core.frontdoor import LoadedPair
from app.core.gguf.tiny import THINKING_SPEC, write_tiny_model
from app.core.remote.client import REMOTE_THINKING
from app.core.speculation.events import Summary
from tests.cli.test_cli import quickdraft

OPEN = ThinkingFormat("<think>", "</think>", True, "enable_thinking")
STREAM = ["Let me", " think.\n</th", "ink>\n\nThe ", "answer."]


def printed(fmt, mode: str, tty: bool, pieces=STREAM) -> str:
    out = io.StringIO()
    printer = ReasoningPrinter(fmt, mode, out, tty=tty)
    for piece in pieces:
        printer.feed(piece)
    printer.finish()
    return out.getvalue()


def test_the_reasoning_is_dimmed_on_a_terminal_marked_elsewhere_or_hidden():
    assert printed(OPEN, "show", tty=True) == f"{DIM}Let me think.{RESET}\n\nThe answer."
    assert printed(OPEN, "show", tty=False) == "Thinking: Let me think.\n\nThe answer."
    assert printed(OPEN, "hide", tty=False) == printed(OPEN, "hide", tty=True) == "The answer."
    assert printed(OPEN, "show", tty=True, pieces=["Cut off"]) == f"{DIM}Cut off{RESET}"   # never ended
    assert printed(None, "hide", tty=False, pieces=["<think>x</think>y"]) == "<think>x</think>y"


class _Engine:
    def __init__(self, fmt, remote_url=None):
        self.fmt, self.asked = fmt, []
        self.pair = LoadedPair("m", "m.gguf", thinking=fmt, remote_url=remote_url)

    def thinking_format(self, variables=None):
        self.asked.append(variables)
        return self.fmt if not variables else ThinkingFormat(self.fmt.start, self.fmt.end,
                                                             variables["enable_thinking"], "enable_thinking")


def test_think_goes_to_the_templates_switch_where_there_is_one():
    engine = _Engine(OPEN)
    assert thinking_setup(engine, None) == (OPEN, {}, None)
    fmt, variables, note = thinking_setup(engine, False)
    assert variables == {"enable_thinking": False} and not fmt.starts_open and note is None
    no_switch = _Engine(ThinkingFormat("<think>", "</think>", False, None))
    assert thinking_setup(no_switch, True)[1:] == ({}, "--think/--no-think ignored: the model's chat template "
                                                       "has no thinking switch")
    remote = _Engine(REMOTE_THINKING, remote_url="http://h:1")   # a server's template is its own
    assert thinking_setup(remote, None) == (REMOTE_THINKING, {}, None)
    assert thinking_setup(remote, True) == (REMOTE_THINKING, {}, "--think/--no-think ignored: a remote "
                                                                 "server's template is its own")


def test_the_statistics_block_splits_the_parts_when_there_were_several():
    summary = Summary(4, 4, 30, 0.1, 0.1, 3.0, 20, 12, 18, 8, 6, 0.1, 1.0,
                      by_part=(("reasoning", 16, 12, 20, 1.0), ("answer", 4, 0, 9, 2.0)))
    assert format_parts(summary) == ["thinking:   20 tokens, 20.000 t/s, accept 75.0% (12/16)",
                                     "answer:     9 tokens, 4.500 t/s, accept 0.0% (0/4)"]
    assert format_parts(Summary(4, 4, 3, 0.1, 0.1, 3.0, 0, 0, 3, 2, 0, 0.0, 1.0,
                                by_part=(("answer", 0, 0, 2, 1.0),))) == []


@pytest.fixture(scope="module")
def thinking_model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("thinking") / "thinking.gguf", THINKING_SPEC)


def test_generate_json_gives_the_reasoning_and_the_answer_apart(thinking_model, tmp_path):
    r = quickdraft("generate", "-m", str(thinking_model), "-p", "hello there", "-n", "32", "--drafter", "lookup",
                   "--json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    # the template opened the block: the tiny model's words begin as reasoning
    assert s["reasoning"] and (s["reasoning"], s["answer"]) == split_reasoning(OPEN, s["text"])
    assert "reasoning" in s["by_part"] and sum(p["tokens"] for p in s["by_part"].values()) == s["generated_tokens"] - 1

    off = quickdraft("generate", "-m", str(thinking_model), "-p", "hello there", "-n", "32", "--drafter", "lookup",
                     "--no-think", "--json", tmp_path=tmp_path)
    s_off = json.loads(off.stdout)
    closed = ThinkingFormat("<think>", "</think>", False, "enable_thinking")
    assert (s_off["reasoning"], s_off["answer"]) == split_reasoning(closed, s_off["text"])
    assert s_off["prompt_tokens"] > s["prompt_tokens"]   # "<think>\n" became "<think>\n\n</think>\n\n"
    assert s_off["reasoning"] is None or s_off["text"].lstrip().startswith("<think>")   # not inside a block


def test_generate_prints_the_reasoning_apart_or_hides_it(thinking_model, tmp_path):
    args = ("generate", "-m", str(thinking_model), "-p", "hello there", "-n", "16", "--drafter", "lookup")
    shown = quickdraft(*args, tmp_path=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Thinking: ")   # not a terminal: a plain marker, no escape codes
    assert DIM not in shown.stdout
    hidden = quickdraft(*args, "--reasoning", "hide", tmp_path=tmp_path)
    assert "Thinking: " not in hidden.stdout
    reasoning, answer = split_reasoning(OPEN, json.loads(quickdraft(*args, "--json", tmp_path=tmp_path).stdout)["text"])
    assert hidden.stdout.strip() == answer.strip()
    assert shown.stdout.removeprefix("Thinking: ").startswith(reasoning[:10])


def test_think_on_a_model_without_a_switch_warns(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-p", "the cat", "-n", "4", "--think", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "warning: --think/--no-think ignored" in r.stderr
