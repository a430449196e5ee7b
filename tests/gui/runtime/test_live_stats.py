"""Live statistics, the footer text and Markdown rendering: plain functions."""

from __future__ import annotations

import re

from app.core.speculation.events import Origin, Round, Started, TokenPiece
from app.gui.chat.render import code_blocks, render_markdown, render_runs, split_blocks
from app.gui.panels.stats_panel import StatsPanel, format_duration, format_rate
from app.gui.runtime.live_stats import LiveStats, format_footer, thin


def test_rounds_give_acceptance_by_round_rolling_and_position():
    live = LiveStats()
    live.add(TokenPiece("a", (1,), Origin.MAIN, at_s=0.010))
    live.add(Round(0, drafted=4, accepted=4, draft_s=0, verify_s=0, generated_tokens=6, at_s=0.1))
    live.add(Round(1, drafted=4, accepted=1, draft_s=0, verify_s=0, generated_tokens=8, at_s=0.2))
    live.add(Round(2, drafted=0, accepted=0, draft_s=0, verify_s=0, generated_tokens=9, at_s=0.3))
    assert live.ttft_s == 0.010
    assert (live.drafted, live.accepted, live.drafting_rounds) == (8, 5, 2)
    assert live.acceptance_rate == 5 / 8 and live.mean_accepted_length == 2.5
    assert live.round_acceptance == [(0, 1.0), (1, 0.25)]
    assert live.rolling_acceptance[-1] == (1, 5 / 8)
    assert live.acceptance_by_position() == [1.0, 0.5, 0.5, 0.5]
    assert live.tps_points[-1] == (0.3, (9 - 6) / (0.3 - 0.1))


def test_prompt_speed_from_the_first_token_and_message_speed_from_the_second():
    """Every time is the engine's stamp; tokens reused from the cache are not counted as decoded."""
    live = LiveStats()
    live.add(Started(prompt_tokens=600, cached_tokens=100))
    assert (live.prompt_tps, live.generation_tps) == (0.0, 0.0)
    live.add(TokenPiece("a", (1,), Origin.MAIN, at_s=104.63))
    assert live.prompt_tps == 500 / 104.63 and live.generation_tps == 0.0
    live.add(TokenPiece("b", (2, 3), Origin.DRAFT, at_s=105.63))
    live.add(Round(0, drafted=2, accepted=2, draft_s=0, verify_s=0, generated_tokens=3, at_s=105.63))
    assert live.generation_tps == 2 / 1.0
    panel = StatsPanel()
    panel.update_from(live)
    shown = panel.values()
    assert (shown["ttft"], shown["prompt_tps"], shown["tps_message"]) == ("104.6 s", "4.8", "2.0")


def test_durations_and_rates_are_formatted_for_reading():
    assert [format_duration(s) for s in (None, 0.0424, 0.9994, 1.0, 104.63)] == ["–", "42 ms", "999 ms", "1.0 s", "104.6 s"]
    assert [format_rate(r) for r in (0.0, 0.4, 4.84, 12.6, 1234.4)] == ["–", "0.4", "4.8", "13", "1234"]


def test_pieces_merge_into_runs_by_origin():
    live = LiveStats()
    for text, origin in [("a", Origin.MAIN), ("b", Origin.DRAFT), ("c", Origin.DRAFT), ("", Origin.MAIN), ("d", Origin.MAIN)]:
        live.add(TokenPiece(text, (1,), origin))
    assert live.runs == [["a", "main"], ["bc", "draft"], ["d", "main"]]
    assert live.text == "abcd"


def test_footer_shows_what_is_known():
    stats = {"generation_tps": 42.06, "generated_tokens": 118, "drafted": 96, "accepted": 71, "stop_reason": "eog"}
    assert format_footer(stats) == "42.1 tok/s · 118 tokens · drafted 96 · accepted 71 (74%)"
    assert format_footer(dict(stats, speedup=1.93)).endswith("· 1.9x measured by Compare")
    both = format_footer(dict(stats, estimated_speedup=1.78, speedup=1.93))
    assert both.endswith("· ≈1.8x vs main alone (estimated) · 1.9x measured by Compare")
    assert format_footer(dict(stats, drafted=0, stop_reason="cancel")) == "42.1 tok/s · 118 tokens · stopped"
    assert format_footer({}) == ""


def test_thin_keeps_the_last_point_and_the_limit():
    points = [(float(i), float(i)) for i in range(1001)]
    kept = thin(points, 100)
    assert len(kept) <= 101 and kept[-1] == points[-1] and kept[0] == points[0]


def test_markdown_splits_fenced_code_and_streams_an_open_fence():
    text = "Intro **bold**\n\n```python\nx = 1\n```\nafter\n\n```\nopen"
    blocks = split_blocks(text)
    assert [(b.kind, b.language) for b in blocks] == [("text", ""), ("code", "python"), ("text", ""), ("code", "")]
    assert code_blocks(text) == ["x = 1", "open"]
    html = render_markdown(text)
    assert "<b>" in html or "font-weight" in html
    assert html.count("copy-code:") == 2 and "after" in html


def test_runs_render_with_origin_colours_and_escape_text():
    html = render_runs([["<b>", "draft"], ["x\x00", "main"]])
    assert "&lt;b&gt;" in html and "\x00" not in html and html.count("background-color") == 2


def test_colour_by_origin_shows_code_blocks_highlighted_without_fences():
    """Issue 41, fault 6: colouring tokens by origin showed the fences (```python) as text and lost the
    code's highlighting; the code block is now as in the Markdown view, each token on its origin's colour."""
    from app.gui.widgets import theme

    runs = [["Here:\n```py", "main"], ["thon\nreturn 42", "draft"], ["\n```\ndone", "main"]]
    shown = render_runs(runs)
    assert "```" not in shown and "copy-code:0" in shown and "done" in shown
    plain = render_markdown("".join(t for t, _ in runs))
    number = re.search(r'<span style="color: ?(#\w+)[^"]*">42</span>', plain).group(1)   # Pygments' colour for 42
    assert re.search(rf'background-color:{theme.DRAFT_BG};color:{number};[^"]*">42</span>', shown, re.IGNORECASE), shown
    assert f'background-color:{theme.MAIN_BG};">Here:' in shown


def test_compares_line_and_the_answers_footer_give_the_same_estimate():
    """Issue 41, fault 6: Compare's line said "its estimate: ≈0.69x" (its own greedy pass's estimate, another
    run) while the answer's footer said ≈0.9x (the answer's). Both now quote the answer's, formatted once."""
    from app.core.compare import CompareResult
    from app.core.speculation.events import Summary
    from app.gui.runtime.chat_values import compare_notice, with_compare

    def run(tps: float, estimate: float | None) -> Summary:
        return Summary(prompt_tokens=10, prompt_tokens_evaluated=10, generated_tokens=100, ttft_s=0.1, prompt_s=0.1,
                       generation_s=100 / tps, drafted=80, accepted=60, main_tokens=40, rounds=30, drafting_rounds=30,
                       draft_s=1.0, verify_s=2.0, token_ids=(1, 2, 3), estimated_speedup=estimate)

    result = CompareResult(run(20.0, 0.69), run(10.0, None))
    answer = {"generation_tps": 18.0, "generated_tokens": 100, "drafted": 80, "accepted": 60, "estimated_speedup": 0.9}
    line, footer = compare_notice(result, answer["estimated_speedup"]), format_footer(with_compare(answer, result))
    assert "2.00x measured (the answer's estimate: ≈0.9x)" in line and "0.69" not in line and "0.7x" not in line
    assert "≈0.9x vs main alone (estimated) · 2.0x measured by Compare" in footer
    assert "estimate" not in compare_notice(result, None)
