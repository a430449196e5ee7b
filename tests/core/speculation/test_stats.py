"""GenerationStats: one generation's numbers from its events."""

from __future__ import annotations

import pytest

from app.core.speculation.events import Origin, Round, Started, StopReason, Summary, TokenPiece
from app.core.speculation.stats import ROLLING_ROUNDS, TPS_WINDOW_S, GenerationStats


def round_(index, drafted, accepted, generated_tokens, at_s, draft_s=0.0, verify_s=0.0, part=""):
    return Round(index, drafted, accepted, draft_s, verify_s, generated_tokens, at_s, part=part)


# 120 prompt tokens, 20 of them from the cache; the first token at 0.5 s, then three rounds:
# 4 drafted 4 accepted (+1 bonus), 4 drafted 1 accepted (+1 correction), no draft (+1)
EVENTS = [
    Started(prompt_tokens=120, cached_tokens=20),
    TokenPiece("a", (1,), Origin.MAIN, at_s=0.5),
    TokenPiece("bcde", (2, 3, 4, 5), Origin.DRAFT, at_s=0.6),
    TokenPiece("f", (6,), Origin.MAIN, at_s=0.6),
    round_(0, 4, 4, 6, 0.6, draft_s=0.02, verify_s=0.05),
    TokenPiece("g", (7,), Origin.DRAFT, at_s=0.7),
    TokenPiece("h", (8,), Origin.MAIN, at_s=0.7),
    round_(1, 4, 1, 8, 0.7, draft_s=0.02, verify_s=0.05),
    TokenPiece("i", (9,), Origin.MAIN, at_s=0.9),
    round_(2, 0, 0, 9, 0.9, verify_s=0.04),
]


def fed(events) -> GenerationStats:
    stats = GenerationStats()
    for event in events:
        stats.add(event)
    return stats


def test_counts_from_a_hand_made_stream():
    s = fed(EVENTS)
    assert (s.prompt_tokens, s.cached_tokens, s.evaluated_tokens) == (120, 20, 100)
    assert (s.generated_tokens, s.drafted, s.accepted, s.main_tokens) == (9, 8, 5, 4)
    assert (s.rounds, s.drafting_rounds) == (3, 2)
    assert s.drafted_by_position == [2, 2, 2, 2] and s.accepted_by_position == [2, 1, 1, 1]
    assert s.draft_s == pytest.approx(0.04) and s.verify_s == pytest.approx(0.14)


def test_rates_from_a_hand_made_stream():
    s = fed(EVENTS)
    assert s.ttft_s == 0.5 and s.generation_s == pytest.approx(0.4)
    assert s.prompt_tps == 100 / 0.5                       # decoded tokens only
    assert s.generation_tps == pytest.approx(8 / 0.4)       # tokens after the first, since the first
    assert s.acceptance_rate == 5 / 8
    assert s.mean_accepted_length == 2.5                     # per round that drafted
    assert s.tokens_per_round == 8 / 3
    assert s.acceptance_by_position() == [1.0, 0.5, 0.5, 0.5]
    assert s.tps_now == pytest.approx((9 - 6) / (0.9 - 0.6))
    assert s.rolling_acceptance_rate == 5 / 8


def test_before_any_round_pieces_count_the_tokens():
    s = fed(EVENTS[:3])
    assert s.generated_tokens == 5 and s.rounds == 0
    assert s.generation_tps == pytest.approx(4 / 0.1)
    assert s.tps_now == 0.0 and s.acceptance_rate == 0.0 and s.acceptance_by_position() == []


def test_the_summary_adds_up_and_agrees_with_the_live_numbers():
    s = fed(EVENTS)
    summary = s.to_summary(generated_tokens=10, end_s=1.0, stop_reason=StopReason.EOG, text="abcdefghi")
    assert summary.generated_tokens == summary.accepted + summary.main_tokens == 10   # + the end token
    assert (summary.drafted, summary.accepted, summary.rounds, summary.drafting_rounds) == (8, 5, 3, 2)
    assert summary.drafted_by_position == (2, 2, 2, 2) and summary.accepted_by_position == (2, 1, 1, 1)
    assert summary.prompt_tokens_evaluated == 100 and summary.ttft_s == summary.prompt_s == 0.5
    assert summary.generation_s == pytest.approx(0.5) and summary.at_s == 1.0
    assert summary.acceptance_by_position() == s.acceptance_by_position()
    assert (summary.acceptance_rate, summary.mean_accepted_length) == (s.acceptance_rate, s.mean_accepted_length)
    assert summary.prompt_tps == s.prompt_tps


def test_the_summary_is_the_final_word():
    """A remote server's summary may count what the stream did not show; the stats follow it."""
    s = fed(EVENTS)
    s.add(Summary(prompt_tokens=120, prompt_tokens_evaluated=120, generated_tokens=12, ttft_s=0.4,
                  prompt_s=0.4, generation_s=1.1, drafted=10, accepted=6, main_tokens=6, rounds=5,
                  drafting_rounds=3, draft_s=0.1, verify_s=0.2, accepted_by_position=(3, 3),
                  drafted_by_position=(3, 3, 3, 1)))
    assert s.summary is not None
    assert (s.generated_tokens, s.drafted, s.accepted, s.rounds, s.cached_tokens) == (12, 10, 6, 5, 0)
    assert s.generation_tps == s.summary.generation_tps == pytest.approx(11 / 1.1)
    assert s.acceptance_by_position() == s.summary.acceptance_by_position() == [1.0, 1.0, 0.0, 0.0]


def test_tokens_per_second_now_forgets_old_rounds():
    rounds = [round_(i, 0, 0, 10 * (i + 1), 0.1 * (i + 1)) for i in range(20)]  # 100 tok/s
    rounds += [round_(20 + i, 0, 0, 200 + i + 1, 2.0 + 0.1 * (i + 1)) for i in range(10)]  # then 10 tok/s
    s = fed(rounds)
    assert s.tps_now == pytest.approx(10.0)
    assert s._window[-1][0] - s._window[0][0] <= TPS_WINDOW_S + 0.1


def test_rolling_acceptance_keeps_the_latest_drafting_rounds():
    early = [round_(i, 4, 4, 5 * (i + 1), 0.1 * i) for i in range(10)]
    late = [round_(10 + 2 * i, 4, 0, 60 + i, 1 + 0.1 * i) for i in range(ROLLING_ROUNDS)]
    idle = [round_(11 + 2 * i, 0, 0, 80 + i, 2 + 0.1 * i) for i in range(ROLLING_ROUNDS)]  # drafted nothing
    s = fed(early + late + idle)
    assert s.rolling_acceptance_rate == 0.0
    assert s.acceptance_rate == 40 / (40 + 4 * ROLLING_ROUNDS)



def test_each_round_says_who_drafted_and_the_summary_counts_each_drafter_apart():
    stats = GenerationStats()
    stats.add(Started(4, 0))
    for i, (drafter, drafted, accepted) in enumerate([("lookup", 5, 5), ("model", 3, 1), ("", 0, 0), ("lookup", 2, 0)]):
        stats.add(Round(i, drafted, accepted, 0.01, 0.02, 2 + i * 3, at_s=0.1 * (i + 1), drafter=drafter))
    summary = stats.to_summary(generated_tokens=11, end_s=0.5, stop_reason=StopReason.LENGTH)
    assert summary.by_drafter == (("lookup", 7, 5), ("model", 3, 1))
    assert summary.to_dict()["by_drafter"] == {"lookup": {"drafted": 7, "accepted": 5},
                                               "model": {"drafted": 3, "accepted": 1}}
    again = GenerationStats()
    again.add(summary)
    assert again.by_drafter == {"lookup": [7, 5], "model": [3, 1]}


def test_the_estimated_speedup_uses_the_answers_own_steps_of_the_main_model_alone():
    """Rounds that drafted nothing time a step of the main model alone in this very answer: with three
    of them their median is the step (an answer that drafted nothing reads ~1x, whatever the cost model
    learned); before that, the cost model's learned step stands in; without either, no estimate."""
    def answer(rounds, learned):
        stats = GenerationStats()
        stats.add(Started(4, 0))
        stats.first_token(0.0)
        for i, (drafted, accepted, verify_s) in enumerate(rounds):
            stats.add(Round(i, drafted, accepted, 0.0, verify_s, 2 + i + accepted, at_s=0.1 * (i + 1)))
        return stats.to_summary(generated_tokens=1 + len(rounds) + sum(a for _, a, _ in rounds),
                                end_s=0.1 * len(rounds), stop_reason=StopReason.LENGTH, main_step_s=learned)

    plain = answer([(0, 0, 0.1)] * 10, learned=0.5)            # nothing drafted, each step 0.1 s
    assert plain.estimated_speedup == pytest.approx(1.0)
    drafted = answer([(0, 0, 0.1)] * 3 + [(4, 4, 0.1)] * 2, learned=0.5)
    assert drafted.estimated_speedup == pytest.approx(0.1 * (drafted.generated_tokens - 1) / 0.5)
    early = answer([(4, 4, 0.1)] * 2, learned=0.05)             # no round alone yet: the learned step
    assert early.estimated_speedup == pytest.approx(0.05 * (early.generated_tokens - 1) / 0.2)
    assert answer([(4, 4, 0.1)] * 2, learned=None).estimated_speedup is None


def test_rounds_tagged_with_their_part_split_the_summarys_counts_and_time_by_part():
    events = [
        Started(10, 0),
        TokenPiece("reasoning", (1,), Origin.MAIN, at_s=0.5),
        TokenPiece("reasoning", (2, 3, 4), Origin.DRAFT, at_s=0.7),
        round_(0, 4, 2, 4, 0.7, part="reasoning"),   # 3 new tokens in 0.2 s, since the first token
        TokenPiece("reasoning", (5, 6), Origin.DRAFT, at_s=0.8),
        TokenPiece("answer", (7,), Origin.MAIN, at_s=0.8),
        round_(1, 2, 1, 7, 0.8, part="reasoning"),   # mostly reasoning
        TokenPiece("answer", (8,), Origin.MAIN, at_s=1.2),
        round_(2, 0, 0, 8, 1.2, part="answer"),      # the main model alone, 0.4 s
        TokenPiece("tool_call", (9, 10, 11, 12), Origin.DRAFT, at_s=1.3),
        round_(3, 4, 3, 12, 1.3, part="tool_call"),
    ]
    summary = fed(events).to_summary(generated_tokens=12, end_s=1.3, stop_reason=StopReason.EOG)
    rows = {part: (d, a, n, pytest.approx(sec)) for part, d, a, n, sec in summary.by_part}
    assert rows == {"reasoning": (6, 3, 6, pytest.approx(0.3)), "answer": (0, 0, 1, pytest.approx(0.4)),
                    "tool_call": (4, 3, 4, pytest.approx(0.1))}
    assert [row[0] for row in summary.by_part] == ["reasoning", "answer", "tool_call"]
    as_json = summary.to_dict()["by_part"]
    assert as_json["reasoning"]["acceptance_rate"] == 0.5 and as_json["tool_call"]["tokens_per_s"] == pytest.approx(40)
    assert fed(events + [summary]).by_part == {part: [d, a, n, sec] for part, d, a, n, sec in summary.by_part}


def test_untagged_rounds_have_no_parts_and_a_summary_without_parts_keeps_what_was_counted():
    stats = fed(EVENTS)
    assert stats.by_part == {} and stats.to_summary(generated_tokens=9, end_s=1.0,
                                                    stop_reason=StopReason.EOG).by_part == ()
    tagged = GenerationStats()
    tagged.add(Round(0, 2, 2, 0.0, 0.0, 4, at_s=0.2, part="reasoning"))
    tagged.add(Summary(4, 4, 4, 0.1, 0.1, 0.1, 2, 2, 2, 1, 1, 0.0, 0.0))   # a remote server's: no parts
    assert tagged.by_part == {"reasoning": [2, 2, 3, pytest.approx(0.2)]}
