"""uvicorn's h11 protocol with a deadline for each request's headers.

uvicorn has none: a client that sends a byte every few seconds keeps its connection, and its file
descriptor, for as long as it likes (300 such connections exhausted a 256-file limit and normal
clients timed out). Here a connection whose request headers are not complete HEADER_TIMEOUT_S after
it opened, or after its previous response, is closed. The API key is checked only once the headers
are in, so the deadline is what protects a server that needs a key too.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0   # llama-server's clients send a request's headers at once; slow links take well under this


class HeaderDeadlineProtocol(H11Protocol):
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:   # this request's headers are in
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()   # the next request on this kept-alive connection gets its own deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE:
            self.transport.close()
