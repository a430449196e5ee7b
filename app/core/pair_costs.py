"""What this machine's batches cost for the loaded pair: the cost model the auto policy learns on while
the pair is loaded, the profiles stored between runs, and an explicit calibration (``quickdraft
calibrate``). The Engine holds one (``Engine.costs``) and asks it for the model each answer runs on."""

from __future__ import annotations

import dataclasses
import time
from typing import Iterator

from app.core.errors import DecodeError
from app.core.gguf.info import GGUFInfo
from app.core.gguf.shared_vocab import SharedVocabulary
from app.core.llama import binding as llama, library
from app.core.params import ModelParams
from app.core.speculation.batch_prior import main_batch_shape
from app.core.speculation.calibration import CALIBRATION_TEXT, calibrate
from app.core.speculation.costmodel import CostModel, CostProfile, ProfileStore, profile_key
from app.core.speculation.events import Event, StopReason, Summary


class PairCosts:
    """The loaded pair's costs: one cost model at a time, keyed by what it depends on."""

    def __init__(self, main: "llama.LlamaSession", main_info: GGUFInfo, main_params: ModelParams,
                 draft: "llama.LlamaSession | None", draft_params: ModelParams | None,
                 shared_vocab: SharedVocabulary | None, store: ProfileStore | None = None):
        self.main, self.main_info, self.main_params = main, main_info, main_params
        self.draft, self.draft_params = draft, draft_params
        self.shared_vocab = shared_vocab
        self.store = store         # keeps profiles between runs (None: they live as long as the engine)
        self._costs: CostModel | None = None

    def model(self, n_max: int) -> CostModel:
        """What this machine's batches cost, learned while the engine answers: kept while the pair
        is loaded, started from the stored profile for this key (warm) or from a prior (cold) whose
        shape follows the main model and where llama.cpp put its layers (app/core/speculation/batch_prior.py:
        a mixture of experts' batch costs more than one step even on a GPU)."""
        key = self.key(n_max)
        if self._costs is None or self._costs.key != key:
            stored = self.store.load(key) if self.store else None
            placement = self.main.model.placement
            shape = main_batch_shape(self.main_info, placement.offloaded / placement.total if placement.total else 0.0,
                                     n_max)
            self._costs = CostModel.from_profile(stored, n_max, shape) if stored else \
                CostModel(key, n_max, prior_shape=shape)
        return self._costs

    def pads(self) -> bool:
        """Whether the loop may pad a verify batch to a cheaper bigger size (``CostProfile.cheapest_batch``):
        a main model of attention layers only (a recurrent state rolls back over a batch's own tokens), on
        a context of its own (a server's merged batches are sized by its slots together), with no decode
        hook reading the hidden state of every position it decodes (an MTP, EAGLE-3 or DFlash head's)."""
        return self.main.memory == llama.ATTENTION and self.main.shared is None and not self.main.decode_hooks

    def use(self, costs: CostModel) -> None:
        """Answer with ``costs`` from now on (it goes on learning): a measurement can take turns between
        two starting points on one engine (scripts/drift_bench.py's stale scenario)."""
        self._costs = costs

    def forget(self) -> None:
        """Drop what was learned; the next answer starts from the stored profile or the prior."""
        self._costs = None

    def key(self, n_max: int) -> dict:
        """What a profile of this pair depends on (``costmodel.profile_key``)."""
        draft = self.draft_params if self.draft is not None else None
        return profile_key(
            self.main_params.path, self.main_params.n_gpu_layers, self.main_params.n_threads or llama.default_threads(),
            draft.path if draft else None, draft.n_gpu_layers if draft else 0,
            (draft.n_threads or llama.default_threads()) if draft else 0, n_max, device=self.main_params.device,
            llama_cpp_version=library.version())

    def profile(self, n_max: int, recalibrate: bool = False, progress=None) -> CostProfile:
        """The machine's cost profile for this pair: what has been learned (or stored) so far; with
        ``recalibrate``, measured now instead (tens of seconds for billion-parameter models:
        ``quickdraft calibrate``), stored, and where learning goes on from."""
        if not recalibrate:
            return self.model(n_max).profile()
        key = self.key(n_max)
        filler = self.main.model.tokenize(CALIBRATION_TEXT, add_special=False, parse_special=False)
        draft_filler = self.draft.model.tokenize(CALIBRATION_TEXT, add_special=False, parse_special=False) \
            if self.draft is not None else None
        measured = calibrate(self.main, self.draft, key, n_max, filler, progress=progress, draft_filler=draft_filler)
        self._costs = CostModel.from_profile(measured, n_max)
        # What is stored and shown is what the cost model reads from the measurement, not the raw times:
        # a size timed far slower than its tokens one by one is not learned (costmodel._one_time_cost), so
        # the next start reads the same profile as this one whatever the machine's load was
        profile = dataclasses.replace(self._costs.profile(measured.context_position), measured_at=measured.measured_at,
                                      seconds=measured.seconds, notes=measured.notes)
        if self.store is not None:
            self.store.save(profile)
        return profile

    def keep_what_is_learned(self, events: Iterator[Event], costs: CostModel,
                             draft_probe: list[int] | None) -> Iterator[Event]:
        """Pass the events on; once the answer is out, store what ``costs`` learned, so that the next
        start is warm. ``draft_probe``: the draft model's step is not known yet; it is timed then,
        after the answer, where it cannot slow the first token (a cold start could not have used the
        draft model in this answer: it waits until batches are measured)."""
        for event in events:
            if isinstance(event, Summary):
                if draft_probe and event.stop_reason is not StopReason.ERROR:
                    self._time_draft_step(costs, draft_probe)
                if event.stop_reason is not StopReason.ERROR:
                    self._time_a_tile(costs)
                self._store(costs)
            yield event

    def _time_a_tile(self, costs: CostModel) -> None:
        """Time one batch size never measured (``CostModel.unmeasured_tile``) at the end of the main
        model's cache, then put the cache back: after the answer, where it cannot slow it, one size an
        answer. On this project's zen4 CPU a learned profile read a batch of 16 at 10 main steps where it
        costs 6.9, the size llama.cpp's CPU kernels take cheapest, since no round had drafted 15 tokens.
        Not on a GPU (each size's first decode there loads its kernels: costmodel.py), nor where the
        loop does not pad or a head reads the main model's every decoded position."""
        keep, size = len(self.main.cached), costs.unmeasured_tile()
        if size is None or costs.on_gpu or not self.pads() or not keep or keep + size >= self.main.n_ctx:
            return
        try:
            costs.observe_main(size, keep, _timed_at_end(self.main, (self.main.cached[-size:] * size)[:size]))
        except DecodeError:
            pass   # a probe only: the size stays unmeasured, and the answer is out

    def _time_draft_step(self, costs: CostModel, probe: list[int]) -> None:
        """Time one draft-model step at the end of its cache, then put the cache back. Twice: the
        first decode after loading also sets up buffers."""
        keep = len(self.draft.cached)
        if self.shared_vocab is not None:
            probe = self.draft.cached[-1:]   # a token of the draft's own vocabulary
        if not probe or keep + 1 >= self.draft.n_ctx:
            return
        costs.observe_draft(1, min(_timed_at_end(self.draft, probe) for _ in range(2)))

    def _store(self, costs: CostModel) -> None:
        if self.store is None or not costs.rounds_now:
            return
        try:
            self.store.save(dataclasses.replace(costs.profile(), measured_at=time.strftime("%Y-%m-%dT%H:%M:%S")))
        except OSError:
            pass  # a profile is only a warm start: the next start learns again


def _timed_at_end(session: "llama.LlamaSession", batch: list[int]) -> float:
    """Seconds to decode ``batch`` (every row's logits, as a verify batch) at the end of ``session``'s
    cache, which is then put back as it was."""
    keep = len(session.cached)
    try:
        started = time.perf_counter()
        session.eval(batch, all_logits=True)
        return time.perf_counter() - started
    finally:
        session.truncate(keep)
