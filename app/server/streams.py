"""Reading a job's posted events on the request's loop: its start, its pieces in bursts, its end."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator

from app.core.speculation.events import Reading, Started, Summary, TokenPiece
from app.core.speculation.stats import GenerationStats
from app.server.worker import Failed, Job


async def started(job: Job) -> Started:
    return as_started(await job.next())


def as_started(item) -> Started:
    """A job's first item: its Started event, or its failure raised."""
    if isinstance(item, Failed):
        raise item.error
    return item


async def first_item_within(job: Job, seconds: float):
    """The job's first item, or None when it has not come in ``seconds`` (it waits for a slot)."""
    try:
        return await asyncio.wait_for(job.next(), seconds)
    except asyncio.TimeoutError:
        return None


@dataclass(frozen=True)
class PromptProgress:
    """llama-server's ``prompt_progress`` (a stream's ``return_progress``): of the prompt's ``total``
    tokens, ``cache`` were in the slot's cache and ``processed`` are in it now, ``seconds`` after
    the answer started."""
    total: int
    cache: int
    processed: int
    seconds: float

    def to_json(self) -> dict:
        return {"total": self.total, "cache": self.cache, "processed": self.processed,
                "time_ms": round(1000 * self.seconds)}


async def summary_of(job: Job) -> Summary:
    async for _pieces, summary, _progress in bursts(job, None):
        if summary is not None:
            return summary


async def bursts(job: Job, live: GenerationStats | None, started: Started | None = None
                 ) -> AsyncIterator[tuple[list[TokenPiece], Summary | None, PromptProgress | None]]:
    """The answer's text pieces in bursts, as llama-server sends them: the first token at once, then
    each round's tokens when the round is over (so their timings carry that round's draft counts);
    last (the pieces still held, Summary). Given the answer's ``started`` event, also the prompt's
    progress as llama-server reports it: before anything is read (the cached part), after each chunk
    read, and once the whole prompt is in, before the first token."""
    pending: list[TokenPiece] = []
    read = None if started is None else started.cached_tokens
    if started is not None:
        yield [], None, PromptProgress(started.prompt_tokens, read, read, 0.0)
    while True:
        item = await job.next()
        if isinstance(item, Failed):
            raise item.error
        event = item
        if live is not None:
            live.add(event)
        if isinstance(event, Summary):
            yield pending, event, None
            return
        if read is not None and isinstance(event, (Reading, TokenPiece)) and read < started.prompt_tokens:
            read = started.cached_tokens + event.done if isinstance(event, Reading) else started.prompt_tokens
            yield [], None, PromptProgress(started.prompt_tokens, started.cached_tokens, read,
                                           event.at_s - started.at_s)
        if isinstance(event, TokenPiece):
            pending += [event] if event.text or event.probs else []   # a piece's log-probabilities too
            if live is None or live.rounds or live.generated_tokens != len(event.token_ids):
                continue  # not the first token: its round sends it
        if pending:
            yield pending, None, None
            pending = []
