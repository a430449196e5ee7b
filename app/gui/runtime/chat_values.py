"""Values and plain functions the ChatController works with: no Qt, no state of their own."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from app.core.chat.reasoning import ThinkingFormat, split_reasoning
from app.core.compare import CompareResult
from app.core.speculation.events import Summary
from app.gui.runtime.live_stats import INTERRUPTED, LiveStats, format_estimate
from app.core.frontdoor import GenerationRequest, LoadedPair
from app.core.params import DrafterKind
from app.gui.runtime.worker import Batch
from app.storage.conversations import ConversationStore, StoredMessage
from app.storage.settings import Settings

TITLE_CHARS = 48
NEW_TITLE = "New chat"
SAVE_PARTIAL_S = 2.0      # a streaming answer is saved this often: a crash or kill -9 loses at most this much


@dataclass(frozen=True)
class ShownConversation:
    conversation_id: int | None     # None: no conversation yet, the first message starts one
    system_prompt: str
    messages: tuple[StoredMessage, ...]
    thinking: bool = True           # the conversation's "Think" switch (for a template that has one)


@dataclass
class ActiveGeneration:
    request: GenerationRequest
    conversation_id: int
    message_id: int                 # the assistant message being written (or compared)
    compare: bool = False
    live: LiveStats = field(default_factory=LiveStats)
    started_at: float | None = None   # the worker's time.monotonic() when decoding began
    saved_at: float | None = None     # time.monotonic() when the streaming answer was last saved

    @property
    def runs(self) -> list[tuple[str, str]]:
        return [tuple(r) for r in self.live.runs]


def feed(live: LiveStats, batch: Batch) -> None:
    """Add a batch of the worker's events (stamped on the engine's clock) to the live numbers."""
    for event in batch.events:
        live.add(event)


def prompt_messages(store: ConversationStore, conversation_id: int, upto_id: int | None = None) -> list[dict]:
    """The chat messages sent to the model: the system prompt, then each message with text, up to
    (not including) message ``upto_id``. A thinking model's earlier reasoning goes as
    ``reasoning_content``, apart from its answer: the template keeps or drops it by its own rule."""
    conv = store.get(conversation_id)
    messages = [{"role": "system", "content": conv.system_prompt}] if conv.system_prompt.strip() else []
    for m in store.messages(conversation_id):
        if m.id == upto_id:
            break
        if m.content or m.reasoning:   # an answer cut off while thinking still holds the turn
            messages.append({"role": m.role, "content": m.content, **({"reasoning_content": m.reasoning}
                                                                      if m.reasoning else {})})
    return messages


def thinking_request(loaded: LoadedPair | None, on: bool) -> tuple[ThinkingFormat | None, dict]:
    """The reasoning markers an answer will use and the template variables that ask for them: with a
    switch in the template, thinking on or off as the conversation says; without one, as it is."""
    if loaded is None or loaded.thinking is None:
        return None, {}
    if loaded.thinking_off is None:
        return loaded.thinking, {}
    return (loaded.thinking if on else loaded.thinking_off), {loaded.thinking.switch: on}


def generation_problem(settings: Settings, loading: bool, loaded: LoadedPair | None, installed: bool) -> str:
    """Why no answer can start now, as the user should read it; "" when one can. With nothing installed
    the first step is getting a model (the first-run panel offers it), not choosing one in the bar."""
    if loading:
        return "The models are still loading."
    if loaded is None and not installed:
        return "No model is installed yet: download a recommended pair or import a GGUF file you have (above)."
    if loaded is None:
        return "No model is loaded. Choose a main model in the bar above and press Load."
    return settings.generation_problem()


def who_drafts(settings: Settings, loaded: LoadedPair | None) -> DrafterKind:
    """Who drafts for the settings' choice with what is loaded (with nothing loaded: no draft model)."""
    chosen = DrafterKind(settings.drafter)   # the settings edge: a name the combo box or the file gave
    return loaded.who_drafts(chosen) if loaded is not None else chosen.without_model()


def answer_request(settings: Settings, loaded: LoadedPair | None, messages: list[dict],
                   thinking_on: bool) -> tuple[ThinkingFormat | None, GenerationRequest]:
    """The request that answers ``messages`` with the settings and the loaded pair, and the reasoning
    markers its answer will use (the conversation's "Think" switch asks the template for them)."""
    thinking, variables = thinking_request(loaded, thinking_on)
    request = GenerationRequest(tuple(messages), sampling=settings.sampling(), speculation=settings.speculation(),
                                drafter=who_drafts(settings, loaded), template_variables=variables)
    return thinking, request


def answer_parts(live: LiveStats, summary: Summary | None = None) -> tuple[str, str]:
    """(the answer, its reasoning) to save: from the summary's whole text once there is one (a remote
    server's is the final word), else as streamed."""
    if summary is not None and summary.text:
        reasoning, answer = split_reasoning(live.thinking, summary.text)
        return answer, reasoning or ""
    return live.text, live.reasoning


def save_partial(store: ConversationStore, active: ActiveGeneration, interrupted: bool = False) -> None:
    """Keep what was generated so far (``interrupted``: marked so, until its summary replaces it); an
    answer with no text at all is removed."""
    answer, reasoning = answer_parts(active.live)
    if answer or reasoning:
        store.update_message(active.message_id, answer, {"stop_reason": INTERRUPTED} if interrupted else {},
                             active.runs, reasoning=reasoning)
    elif not interrupted:
        store.delete_message(active.message_id)


def keep_partial(store: ConversationStore, active: ActiveGeneration) -> None:
    """Save the answer as it streams (first text at once, then every SAVE_PARTIAL_S) marked interrupted
    until its summary is saved instead: after a crash it shows as interrupted."""
    now, live = time.monotonic(), active.live
    if (live.text or live.reasoning) and live.summary is None and now - (active.saved_at or 0.0) >= SAVE_PARTIAL_S:
        save_partial(store, active, interrupted=True)
        active.saved_at = now


def settings_after_load(settings: Settings, info: LoadedPair, remote_api_key: str = "") -> Settings:
    """The loaded pair becomes the one opened next time and heads the recent lists; a server heads
    the recent servers (the next start opens the local pair again: a server may be gone by then)."""
    if info.remote_url:
        return replace(settings.with_recent_remote(info.remote_url), remote_api_key=remote_api_key)
    settings = replace(settings, main_model=info.main_path, draft_model=info.draft_path or "")
    settings = settings.with_recent_main(info.main_path)
    return settings.with_recent_draft(info.draft_path) if info.draft_path else settings


def with_compare(stats: dict, result: CompareResult) -> dict:
    """A message's stats with a compare's result added."""
    return dict(stats, speedup=result.speedup, compare_identical=result.identical,
                compare_speculative_tps=result.speculative.generation_tps,
                compare_baseline_tps=result.baseline.generation_tps)


def compare_notice(result: CompareResult, estimate: float | None) -> str:
    """Compare's line above the chat. ``estimate``: the answer's own estimated speedup, as its footer
    shows it; the estimate of Compare's greedy pass (another run, often another answer) is not the
    answer's, and quoting it as "its estimate" read as a contradiction of the footer."""
    same = "the outputs are identical" if result.identical else "the outputs differ"
    estimated = f" (the answer's estimate: {format_estimate(estimate)})" if estimate else ""
    return (f"Compare (greedy): speculative {result.speculative.generation_tps:.1f} tok/s, main model alone "
            f"{result.baseline.generation_tps:.1f} tok/s: {result.speedup:.2f}x measured{estimated}; {same}.")


def title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1].rstrip() + "…"
