"""uvicorn's h11 protocol with deadlines for each request's headers and body, and a quiet refusal
of connections when the process is out of file descriptors.

uvicorn has no such deadlines: a client that sends a byte every few seconds keeps its connection,
and its file descriptor, for as long as it likes (300 such connections exhausted a 256-file limit
and normal clients timed out). Here a connection whose request headers are not complete
HEADER_TIMEOUT_S after it opened, or after its previous response, is closed. Once the headers are
in, the body gets its own deadline, which moves as the body arrives: BODY_GRACE_S plus the time the
bytes received so far take at MIN_BODY_RATE. Each connection is timed on its own, so one slow client
costs only its own connection; a body that falls behind gets a 408 and the connection is closed.
The API key is checked only once the headers are in, so the deadlines protect a server that needs
a key too.
"""

from __future__ import annotations

import asyncio
import json
import sys

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0   # llama-server's clients send a request's headers at once; slow links take well under this
BODY_GRACE_S = 10.0       # what any body may take, however small
MIN_BODY_RATE = 64 << 10  # bytes a second a body must keep up beyond the grace: 8 MiB (the limit) in 2 min 18 s
ACCEPT_LOG_INTERVAL_S = 60.0   # at most one line a minute about connections refused for want of descriptors


class HeaderDeadlineProtocol(H11Protocol):
    _deadline: asyncio.TimerHandle | None = None
    _body_started: float | None = None   # loop time the current request's headers were in; None outside a body
    _body_bytes = 0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._body_started is not None:
            self._body_bytes += len(data)
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        state = self.conn.their_state
        if state is h11.SEND_BODY and self._body_started is None:   # this request's headers are in
            self._arm_body()
        elif state is not h11.IDLE and state is not h11.SEND_BODY:  # its body too (or the connection ended)
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

    def _arm_body(self) -> None:
        self._disarm()
        self._body_started, self._body_bytes = self.loop.time(), 0
        self._deadline = self.loop.call_at(self._body_due(), self._body_check)

    def _disarm(self) -> None:
        self._body_started = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE:
            self.transport.close()

    def _body_due(self) -> float:
        return self._body_started + BODY_GRACE_S + self._body_bytes / MIN_BODY_RATE

    def _body_check(self) -> None:
        """Checked when the body was due, not on every byte: a body that kept up moves the check on."""
        self._deadline = None
        if self.conn.their_state is not h11.SEND_BODY or self._body_started is None:
            return
        due = self._body_due()
        if self.loop.time() < due:
            self._deadline = self.loop.call_at(due, self._body_check)
            return
        self._body_started = None
        self._refuse_slow_body()

    def _refuse_slow_body(self) -> None:
        """A 408 if the app has not answered yet (it is still waiting for the body), then close: the
        app then sees the client leave (app.py's body reader ends quietly)."""
        if self.cycle is not None and not self.cycle.response_started and not self.transport.is_closing():
            body = json.dumps({"error": {
                "message": f"The request body came too slowly: give it at least {MIN_BODY_RATE >> 10} KiB/s "
                           f"after the first {BODY_GRACE_S:.0f} s.",
                "type": "invalid_request_error", "param": None, "code": "request_timeout"}}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                       (b"connection", b"close")]
            for event in (h11.Response(status_code=408, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
        self.transport.close()


class AcceptErrorThrottle:
    """A loop exception handler that reports refused accepts (EMFILE and the like) once per
    ACCEPT_LOG_INTERVAL_S with their count: asyncio logs a traceback for every try, which under a
    crowd of held connections grew stderr by 72 MB in 50 s. Anything else goes to the default handler."""

    MESSAGE = "socket.accept() out of system resource"

    def __init__(self):
        self.refused = 0
        self.next_report = 0.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if context.get("message") != self.MESSAGE:
            loop.default_exception_handler(context)
            return
        self.refused += 1
        if loop.time() >= self.next_report:
            print(f"quickdraft: refusing connections: {context.get('exception')} ({self.refused} refused since the "
                  f"last report; raise the limit with 'ulimit -n')", file=sys.stderr, flush=True)
            self.refused, self.next_report = 0, loop.time() + ACCEPT_LOG_INTERVAL_S

    @classmethod
    def install(cls) -> None:
        asyncio.get_running_loop().set_exception_handler(cls())
