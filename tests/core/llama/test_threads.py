"""The thread count follows the machine: a simulated two-core machine, quiet or with one core busy,
decodes with whatever count the tuner picks; the tuner must find the fast count, follow a change and
cost little while the machine stays the same."""

import random

import pytest

from app.core.llama.threads import MAX_INTERVAL, ThreadTuner

QUIET = {1: 0.040, 2: 0.025}          # seconds per one-token decode, by threads
ONE_CORE_BUSY = {1: 0.043, 2: 0.200}  # a thread that lost its core holds every barrier


def decode_time(machine: dict[int, float], threads: int, n_tokens: int, rng: random.Random) -> float:
    return machine[threads] * (1 + 0.15 * (n_tokens - 1)) * rng.uniform(0.9, 1.1)


def run(tuner: ThreadTuner, machines: list[dict[int, float]], decodes_each: int, seed: int = 1):
    """Decodes on each machine in turn; returns (total seconds, counts used) per machine."""
    rng = random.Random(seed)
    results = []
    for machine in machines:
        total, used = 0.0, []
        for i in range(decodes_each):
            n_tokens = 1 + (i % 3 == 0) * 3     # plain steps and verify batches of 4, as speculation does
            threads = tuner.next_count()
            seconds = decode_time(machine, threads, n_tokens, rng)
            tuner.observe(n_tokens, threads, seconds)
            total += seconds
            used.append(threads)
        results.append((total, used))
    return results


def best_total(machine: dict[int, float], decodes: int, seed: int = 1) -> float:
    fastest = min(machine, key=machine.get)
    return run(ThreadTuner(fastest, most=2, fixed=True), [machine], decodes, seed)[0][0]


def test_a_quiet_machine_keeps_all_threads_and_probing_costs_under_two_percent():
    tuner = ThreadTuner(2, most=2)
    [(total, used)] = run(tuner, [QUIET], 2000)
    assert tuner.current == 2 and tuner.changes == 0
    assert tuner.probes >= 3            # it did look
    assert total < best_total(QUIET, 2000) * 1.02


def test_one_busy_core_moves_to_one_thread_within_a_few_dozen_decodes():
    tuner = ThreadTuner(2, most=2)
    [(total, used)] = run(tuner, [ONE_CORE_BUSY], 1000)
    assert tuner.current == 1
    assert used.index(1) < 12
    assert used[60:].count(1) >= 0.99 * len(used[60:])
    assert total < best_total(ONE_CORE_BUSY, 1000) * 1.05
    assert total < best_total(QUIET, 1000) / QUIET[2] * ONE_CORE_BUSY[2] / 4  # far from staying at two


def test_the_count_follows_a_load_that_starts_and_then_ends():
    tuner = ThreadTuner(2, most=2)
    (_, quiet), (_, busy), (_, quiet_again) = run(tuner, [QUIET, ONE_CORE_BUSY, QUIET], 3000)
    assert quiet[-100:].count(2) >= 97
    first_single = busy.index(1)
    assert first_single < 40, "a load that starts is seen within a few dozen decodes"
    assert busy[-200:].count(1) >= 195
    back = quiet_again.index(2)
    assert back <= 2 * MAX_INTERVAL, "a load that ends is seen within the longest wait between probes"
    assert quiet_again[-100:].count(2) >= 97


def test_a_count_the_user_gave_never_changes():
    tuner = ThreadTuner(2, most=2, fixed=True)
    [(_, used)] = run(tuner, [ONE_CORE_BUSY], 500)
    assert set(used) == {2} and tuner.probes == 0


def test_prompt_sized_decodes_are_not_compared():
    tuner = ThreadTuner(2, most=2)
    for _ in range(200):
        tuner.observe(512, tuner.next_count(), 1.0)
    assert tuner.probes == 0 and tuner.next_count() == 2


def test_one_core_means_one_thread_and_no_probes():
    tuner = ThreadTuner(4, most=1)
    run(tuner, [{1: 0.04}], 300)
    assert tuner.current == 1 and tuner.probes == 0


@pytest.mark.parametrize("start", [1, 2, 3, 4])
def test_more_cores_find_the_fastest_count_from_any_start(start):
    # four cores, two kept busy: two threads is fastest, more stall at barriers, fewer do less
    machine = {1: 0.060, 2: 0.034, 3: 0.150, 4: 0.220}
    tuner = ThreadTuner(start, most=4)
    [(_, used)] = run(tuner, [machine], 1500)
    assert tuner.current == 2
    assert used[-200:].count(2) >= 190


# --- on a real llama.cpp context ------------------------------------------------------------------

class Scripted(ThreadTuner):
    """A tuner that asks for the given counts in turn and records what it was told."""

    def __init__(self, counts):
        super().__init__(counts[0], most=8)
        self.counts, self.seen = list(counts), []

    def next_count(self):
        return self.counts[len(self.seen) % len(self.counts)]

    def observe(self, n_tokens, threads, seconds):
        self.seen.append((n_tokens, threads))


@pytest.fixture(params=["llama", "lfm2", "mamba"])
def tiny_session(request, tiny_models, tmp_path_factory):
    """A session on a tiny model whose memory is attention (llama), hybrid (lfm2) or recurrent (mamba)."""
    from app.core.gguf.tiny import TinySpec, write_tiny_model
    from app.core.llama.binding import LlamaModel, LlamaSession
    from app.core.params import ModelParams

    path = tiny_models.main if request.param == "llama" else write_tiny_model(
        tmp_path_factory.mktemp("threads") / f"{request.param}.gguf", TinySpec(architecture=request.param))
    model = LlamaModel(ModelParams(str(path), n_gpu_layers=0))
    yield lambda threads=None: LlamaSession(model, n_ctx=128, n_threads=threads)
    model.close()


def greedy(session, prompt, n):
    import numpy as np

    out = []
    logits = session.eval(prompt)
    for _ in range(n):
        out.append(int(np.argmax(logits[-1])))
        logits = session.eval(out[-1:])
    return out


def test_each_decode_runs_with_the_count_the_tuner_chose_and_reports_it(tiny_session):
    from app.core.llama.library import lib

    session = tiny_session()
    assert not session.threads.fixed        # no count given: it is learned
    plain = greedy(session, [1, 5, 9, 13], 12)
    session.truncate(0)
    session.threads = Scripted([1, 2, 3])
    counts_in_llama = []
    session.decode_hooks.append(lambda start, n: counts_in_llama.append(lib().llama_n_threads(session.raw_context)))
    assert greedy(session, [1, 5, 9, 13], 12) == plain   # the count changes speed, never tokens
    assert counts_in_llama == [[1, 2, 3][i % 3] for i in range(13)]
    assert session.threads.seen == [(4, 1)] + [(1, [1, 2, 3][i % 3]) for i in range(1, 13)]
    session.close()


def test_a_count_the_user_gave_is_fixed(tiny_session):
    session = tiny_session(3)
    assert session.threads.fixed and session.n_threads == 3
    greedy(session, [1, 5, 9], 40)
    assert session.n_threads == 3 and session.threads.probes == 0
    session.close()


# --- a trial stopped at its deadline, and the count to start from ------------------------------------

def test_a_decode_on_trial_gets_a_deadline_and_a_stopped_one_loses():
    tuner = ThreadTuner(1, most=2)
    assert tuner.deadline(1) is None                   # nothing on trial
    for _ in range(2):
        tuner.observe(1, 1, 0.040)
    assert tuner.next_count() == 2                     # on trial
    assert tuner.deadline(1) == pytest.approx(0.040 * 1.4)
    assert tuner.deadline(4) == pytest.approx(0.040 * 1.4 * 4)   # no time for this size: at most a step a token
    tuner.stopped()
    assert tuner.next_count() == 1 and tuner.current == 1 and tuner.deadline(1) is None
    fewer = ThreadTuner(2, most=2)
    for _ in range(2):
        fewer.observe(1, 2, 0.025)
    assert fewer.next_count() == 1 and fewer.deadline(1) is None   # a trial of fewer threads is not stopped


def test_the_start_is_the_faster_count_of_the_first_decodes():
    quiet = ThreadTuner(2, most=2)
    quiet.start_from(0.040, 0.025)
    assert quiet.current == 2
    busy = ThreadTuner(2, most=2)
    busy.start_from(0.040, None)                       # stopped at its deadline
    assert busy.current == 1
    for _ in range(31):                                # both were just compared: no trial soon
        busy.observe(1, busy.next_count(), 0.040)
        assert busy.next_count() == 1
    fixed = ThreadTuner(2, most=2, fixed=True)
    fixed.start_from(0.040, None)
    assert fixed.current == 2


def test_a_stopped_decode_is_decoded_again_and_the_answer_is_the_same(tiny_session):
    session = tiny_session()
    plain = greedy(session, [1, 5, 9, 13], 12)
    session.truncate(0)

    class SomeDecodesStopped(Scripted):
        """Every third decode is on trial with a deadline already past (llama.cpp stops it after its
        first node); what follows (a recurrent cache read again, the batch again) has none."""

        def __init__(self):
            super().__init__([1])
            self.stops, self.retry = 0, False

        def deadline(self, n_tokens):
            return 0.0 if len(self.seen) % 3 == 2 and not self.retry else None

        def stopped(self):
            self.stops, self.retry = self.stops + 1, True

        def observe(self, n_tokens, threads, seconds):
            super().observe(n_tokens, threads, seconds)
            self.retry = False

    session.threads = SomeDecodesStopped()
    assert greedy(session, [1, 5, 9, 13], 12) == plain   # the cache was put back in order each time
    assert session.threads.stops >= 3 and session.cached[:4] == [1, 5, 9, 13] and len(session.cached) == 16
    session.close()


def test_a_session_starts_from_timed_first_tokens_and_leaves_its_cache_empty(tiny_session):
    session = tiny_session()
    assert session.cached == [] and session.kv_positions() == (-1, -1)
    if session.threads.most > 1:
        assert (1, 1) in session.threads._times        # one thread was timed at start, against the default
    else:
        assert session.threads._times == {}            # one core to run on: no count to choose, none timed
    session.close()


def test_a_decode_is_timed_until_its_work_is_done_not_only_queued(tiny_session, monkeypatch):
    """A GPU's llama_decode returns once the work is queued: the clock the thread tuner and the host
    overhead benchmark read stops after llama_synchronize (here made to take 50 ms), not before it."""
    import time

    from app.core.llama.library import lib

    session = tiny_session(1)
    session.eval([1, 5, 9])
    waited = []
    monkeypatch.setattr(lib(), "llama_synchronize", lambda ctx: (waited.append(ctx), time.sleep(0.05)))
    before = session.decode_s
    session.eval([13])
    assert waited == [session.raw_context] and session.decode_s - before >= 0.05
    session.close()
