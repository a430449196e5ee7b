"""Thinking models: the reasoning markers read from real chat templates (copied from llama.cpp's
models/templates into templates/), the reasoning cut from streamed text, the part of each token, and
a tiny model whose template thinks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from app.core.chat.prompt import render_prompt
from app.core.chat.reasoning import (PartTracker, ReasoningSplitter, SpelledVocabulary, ThinkingFormat, spelled_markers,
                                     split_reasoning, thinking_format)
from app.core.engine import Engine
from app.core.gguf.tiny import THINKING_SPEC, TinySpec, write_tiny_model
from app.core.llama.binding import LlamaModel
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.core.speculation.events import Round, Summary, TokenPiece

TEMPLATES = Path(__file__).parent / "templates"
THINK = ThinkingFormat("<think>", "</think>", False, "enable_thinking")
HI = [{"role": "user", "content": "Hi"}]


def _format(name: str, variables=None) -> ThinkingFormat | None:
    template = (TEMPLATES / name).read_text(encoding="utf-8")
    rendered = render_prompt(HI, template, "<s>", "</s>", variables)
    assert rendered.templated
    return thinking_format(template, rendered.text.rsplit("Hi", 1)[-1])


@pytest.mark.parametrize("name, variables, expected", [
    # Qwen3: the model opens <think> itself; switched off, the prompt holds an empty closed block
    ("Qwen-Qwen3-0.6B.jinja", None, ("<think>", "</think>", False, "enable_thinking")),
    ("Qwen-Qwen3-0.6B.jinja", {"enable_thinking": False}, ("<think>", "</think>", False, "enable_thinking")),
    # Qwen3.5 and DeepSeek R1 (llama.cpp's copy) open the block in the generation prompt
    ("Qwen3.5-4B.jinja", None, ("<think>", "</think>", True, "enable_thinking")),
    ("Qwen3.5-4B.jinja", {"enable_thinking": False}, ("<think>", "</think>", False, "enable_thinking")),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", {"enable_thinking": True},
     ("<think>", "</think>", True, "enable_thinking")),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", {"enable_thinking": False},
     ("<think>", "</think>", False, "enable_thinking")),
    # gpt-oss: harmony channels, no switch (it reads reasoning_effort)
    ("openai-gpt-oss-120b.jinja", None, ("<|channel|>analysis<|message|>", "<|end|>", False, None)),
    # Gemma 4: thinking off unless enable_thinking; off, the prompt closes an empty thought channel
    ("google-gemma-4-31B-it.jinja", {"enable_thinking": True}, ("<|channel>thought", "<channel|>", False,
                                                                "enable_thinking")),
    ("google-gemma-4-31B-it.jinja", None, ("<|channel>thought", "<channel|>", False, "enable_thinking")),
])
def test_the_format_of_real_thinking_templates(name, variables, expected):
    assert _format(name, variables) == ThinkingFormat(*expected)


def test_a_template_that_does_not_think_has_no_format():
    assert _format("Qwen-Qwen2.5-7B-Instruct.jinja") is None
    assert thinking_format(None) is None and thinking_format("") is None


@pytest.mark.parametrize("fmt, text, expected", [
    (THINK, "<think>\nThe user greets.\n\nGreet back.\n</think>\n\nHello!",
     ("The user greets.\n\nGreet back.", "Hello!")),
    (ThinkingFormat("<think>", "</think>", True, None), "Count: 1, 2.\n</think>\n\nTwo.", ("Count: 1, 2.", "Two.")),
    (THINK, "No thinking here, and a literal <think> tag later.", (None, "No thinking here, and a literal <think> tag later.")),
    (THINK, "<think>\n\n</think>\n\nAt once.", (None, "At once.")),
    (ThinkingFormat("<think>", "</think>", True, None), "Still thinking when cut off", ("Still thinking when cut off", "")),
    # gpt-oss, with <|end|> spelled and as llama.cpp renders it (a control token: nothing)
    (ThinkingFormat("<|channel|>analysis<|message|>", "<|end|>", False, None),
     "<|channel|>analysis<|message|>Simple greeting.<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
     ("Simple greeting.", "Hi!")),
    (ThinkingFormat("<|channel|>analysis<|message|>", "<|end|>", False, None),
     "<|channel|>analysis<|message|>Simple greeting.<|start|>assistant<|channel|>final<|message|>Hi!",
     ("Simple greeting.", "Hi!")),
    (ThinkingFormat("<|channel|>analysis<|message|>", "<|end|>", False, None),
     "<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant<|channel|>analysis<|message|>Found."
     "<|end|><|start|>assistant<|channel|>final<|message|>Paris.", ("Look it up.\n\nFound.", "Paris.")),
    (ThinkingFormat("<|channel>thought", "<channel|>", False, "enable_thinking"),
     "<|channel>thought\nPlan the reply.<channel|>Sure.", ("Plan the reply.", "Sure.")),
    (None, "<think>x</think>y", (None, "<think>x</think>y")),
])
def test_split_reasoning(fmt, text, expected):
    assert split_reasoning(fmt, text) == expected


@pytest.mark.parametrize("seed", range(20))
def test_streamed_in_any_pieces_the_split_is_the_whole_texts(seed):
    rng = random.Random(seed)
    text = "  <think>\nA first thought.\n\n  Then </thi nk another.\n</think>\n\n  The answer <think> stays."
    splitter, pieces, at = ReasoningSplitter(THINK), [], 0
    while at < len(text):
        step = rng.randint(1, 6)
        pieces += splitter.feed(text[at:at + step])
        at += step
    pieces += splitter.finish()
    assert all(part in ("reasoning", "answer") and chunk for part, chunk in pieces)
    joined = ("".join(c for p, c in pieces if p == "reasoning"), "".join(c for p, c in pieces if p == "answer"))
    assert joined == split_reasoning(THINK, text) == ("A first thought.\n\n  Then </thi nk another.",
                                                      "The answer <think> stays.")
    assert [p for p, _ in pieces] == sorted([p for p, _ in pieces], key=("reasoning", "answer").index)


def test_a_marker_split_over_pieces_is_held_back():
    splitter = ReasoningSplitter(ThinkingFormat("<think>", "</think>", True, None))
    assert splitter.feed("Thinking </th") == [("reasoning", "Thinking")]
    assert splitter.part == "reasoning"
    assert splitter.feed("ink>\n\nDone") == [("answer", "Done")]
    assert splitter.part == "answer" and splitter.finish() == []


def test_each_piece_gets_its_part_tool_calls_included():
    tracker = PartTracker(THINK)
    parts = [tracker.piece(text, 1) for text in
             ["<think>", "\nPlan", ".</think>", "\n\nCalling", ". <tool", "_call>\n{\"name\"", ": 1}\n</tool_call>",
              " Done."]]
    assert parts == ["reasoning", "reasoning", "reasoning", "answer", "answer", "tool_call", "tool_call", "answer"]
    no_thinking = PartTracker(None)
    assert [no_thinking.piece(t, 2) for t in ("Hi", "<tool_call>{}", "</tool_call>")] == ["answer", "tool_call",
                                                                                          "tool_call"]
    assert no_thinking.take() == "tool_call"   # 4 tokens of tool call against 2 of answer
    assert no_thinking.take() == "tool_call"   # nothing since: the latest part


def test_a_formats_call_spans_tag_its_calls_and_only_a_calls_end_closes_one():
    from app.core.chat.tools import CALL_SPANS, ToolFormat

    hermes = PartTracker(None, CALL_SPANS[ToolFormat.HERMES])   # Qwen2.5-Coder fences its calls in ```json
    parts = [hermes.piece(t, 1) for t in ("Sure.", "```json\n{\"name\"", ": \"f\"}", "\n```", " Then", " ```python",
                                           "\nx = 1")]
    assert parts == ["answer", "tool_call", "tool_call", "tool_call", "answer", "answer", "answer"]
    llama3 = PartTracker(None, CALL_SPANS[ToolFormat.LLAMA3])    # a bare call runs to the answer's end
    assert [llama3.piece(t, 1) for t in ('{"name"', ': "f", "parameters": {}}', "")] == ["tool_call"] * 3


def test_control_tokens_of_markers_are_spelled(tmp_path):
    model = LlamaModel(ModelParams(str(write_tiny_model(tmp_path / "chatml.gguf", TinySpec(chat_tokens=True)))))
    try:
        fmt = ThinkingFormat("<|im_start|>", "<|im_end|>", False, None)   # control tokens: rendered as nothing
        spelled = spelled_markers(model, fmt)
        assert sorted(spelled.values()) == ["<|im_end|>", "<|im_start|>"]
        vocab = SpelledVocabulary(model, spelled)
        ids = model.tokenize("<|im_start|>a<|im_end|>", add_special=False, parse_special=True)
        plain = b"".join(model.piece(t) for t in ids)
        assert plain.strip() == b"a"
        assert b"".join(vocab.piece(t) for t in ids) == b"<|im_start|>" + plain + b"<|im_end|>"
        assert spelled_markers(model, THINK) == {}   # not in this vocabulary as tokens: nothing to spell
    finally:
        model.close()


@pytest.fixture(scope="module")
def thinking_engine(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("thinking") / "thinking.gguf", THINKING_SPEC)
    engine = Engine.load(ModelParams(str(path), n_ctx=512))
    yield engine
    engine.close()


def test_the_engine_reads_the_tiny_thinking_models_format(thinking_engine):
    assert thinking_engine.thinking_format() == ThinkingFormat("<think>", "</think>", True, "enable_thinking")
    assert thinking_engine.thinking_format({"enable_thinking": False}).starts_open is False
    text = thinking_engine.main.model.token_text
    assert [text(t) for t in thinking_engine.main.model.tokenize("<think>", add_special=False)] == ["<think>"]


@pytest.mark.parametrize("think", [True, False])
def test_a_thinking_answers_rounds_say_their_part(thinking_engine, think):
    events = list(thinking_engine.generate(GenerationRequest(HI, sampling=SamplingParams(max_tokens=40, seed=1),
                                           speculation=SpeculationParams(policy="fixed", draft_max=3),
                                           drafter=DrafterKind.LOOKUP, template_variables={"enable_thinking": think})))
    summary = events[-1]
    assert isinstance(summary, Summary)
    rounds = [e for e in events if isinstance(e, Round)]
    assert rounds and all(r.part in ("reasoning", "answer", "tool_call") for r in rounds)
    # what the tags say agrees with the splitter run over the streamed text, round by round
    fmt = thinking_engine.thinking_format({"enable_thinking": think})
    tracker = PartTracker(fmt)
    for event in events:
        if isinstance(event, TokenPiece):
            tracker.piece(event.text, len(event.token_ids))
        elif isinstance(event, Round):
            assert event.part == tracker.take()
    if not think:   # the block is closed in the prompt: no reasoning
        assert {r.part for r in rounds} <= {"answer", "tool_call"}
    else:           # the output begins inside the reasoning
        assert rounds[0].part == "reasoning"
    assert sum(n for _, _, _, n, _ in summary.by_part) == len(summary.token_ids) - 1   # all but the first token
    assert sum(d for _, d, _, _, _ in summary.by_part) == summary.drafted
    assert sum(a for _, _, a, _, _ in summary.by_part) == summary.accepted
