"""The window with a draft of another vocabulary: the worker loads the pair (the engine drafts through
text), the answer is the main model's own, and the speculation panel shows the drafts' acceptance."""

from __future__ import annotations

from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.core.speculation.acceptance import CROSS
from app.gui.panels.stats_panel import SpeculationPanel
from app.gui.runtime.live_stats import LiveStats
from app.core.frontdoor import GenerationRequest, LoadedPair
from app.gui.runtime.worker import EngineWorker, LoadRequest
from tests.gui.runtime.test_worker import MESSAGES, record


def test_a_draft_of_another_vocabulary_loads_drafts_and_shows_its_acceptance(gui_models, qtbot):
    worker = EngineWorker()
    seen = record(worker)
    worker.load(LoadRequest(ModelParams(str(gui_models.main), n_ctx=512, n_threads=1),
                            ModelParams(str(gui_models.other_vocab), n_ctx=512, n_threads=1)))
    try:
        [loaded] = seen["loaded"]
        assert isinstance(loaded, LoadedPair) and not seen["load_failed"]
        speculation = SpeculationParams(policy="fixed", draft_max=4)
        worker.compare(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=40), speculation=speculation,
                                         drafter=DrafterKind.MODEL))
        [compared] = seen["compared"]
        assert compared.identical and compared.speculative.drafted > 0
        assert [name for name, _, _ in compared.speculative.by_drafter] == [CROSS]

        worker.generate(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=40), speculation=speculation,
                                          drafter=DrafterKind.MODEL))
        [summary] = seen["finished"]
        live = LiveStats()
        for batch in seen["batch"]:
            for event in batch.events:
                live.add(event)
        live.add(summary)
        panel = SpeculationPanel()
        qtbot.addWidget(panel)
        panel.update_from(live)
        assert summary.drafted > 0 and summary.token_ids == compared.baseline.token_ids
        assert panel.stats.values()["acceptance"] == f"{100 * summary.acceptance_rate:.0f}%"
        assert panel.stats.values()["drafted"] == str(summary.drafted)
        assert len(live.acceptance_by_position()) == 4 and live.round_acceptance
    finally:
        worker._close_engine()
