"""Reading a job's posted events on the request's loop: its start, its pieces in bursts, its end."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from app.core.speculation.events import Started, Summary, TokenPiece
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


async def summary_of(job: Job) -> Summary:
    async for _pieces, summary in bursts(job, None):
        if summary is not None:
            return summary


async def bursts(job: Job, live: GenerationStats | None) -> AsyncIterator[tuple[list[TokenPiece], Summary | None]]:
    """The answer's text pieces in bursts, as llama-server sends them: the first token at once, then
    each round's tokens when the round is over (so their timings carry that round's draft counts);
    last (the pieces still held, Summary)."""
    pending: list[TokenPiece] = []
    while True:
        item = await job.next()
        if isinstance(item, Failed):
            raise item.error
        event = item
        if live is not None:
            live.add(event)
        if isinstance(event, Summary):
            yield pending, event
            return
        if isinstance(event, TokenPiece):
            pending += [event] if event.text or event.probs else []   # a piece's log-probabilities too
            if live is None or live.rounds or live.generated_tokens != len(event.token_ids):
                continue  # not the first token: its round sends it
        if pending:
            yield pending, None
            pending = []
