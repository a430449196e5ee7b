"""Bind, check the exposure rules, and serve the app with uvicorn, on this thread or its own."""

from __future__ import annotations

import ipaddress
import socket
import threading

import uvicorn

from app.core.errors import QuickdraftError
from app.server.app import create_app
from app.server.options import ServerOptions
from app.server.protocol import AcceptErrorThrottle, HeaderDeadlineProtocol
from app.server.worker import JobQueue

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def check_exposure(host: str, api_key: str | None) -> None:
    """Only loopback may listen without an API key: anyone who reaches the port could use the model."""
    if not is_loopback(host) and not api_key:
        raise QuickdraftError(
            f"listening on {host} lets other machines use this model; give --api-key KEY (clients then send "
            f"'Authorization: Bearer KEY') or listen on {DEFAULT_HOST}")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, so a taken port or a wrong address fails here with a clear message."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        raise QuickdraftError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        AcceptErrorThrottle.install()   # one line a minute about refused connections, not one per try
        await super().serve(sockets)


def hosts_of(host: str) -> list[str]:
    """llama-server's --host: one address, or several separated by commas, each listened on."""
    hosts = [h.strip() for h in host.split(",") if h.strip()]
    if not hosts:
        raise QuickdraftError("--host names no address")
    return hosts


def bind_all(hosts: list[str], port: int) -> list[socket.socket]:
    """A listening socket on each address, all on one port (the first one's, where ``port`` is 0)."""
    sockets: list[socket.socket] = []
    try:
        for host in hosts:
            sockets.append(bind(host, port))
            port = sockets[0].getsockname()[1]
    except QuickdraftError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class LocalServer:
    """The HTTP server for one job queue: ``run()`` on this thread (the CLI), or ``start()`` on
    its own (tests, the window), then ``stop()``. ``host``: one address or several, comma-separated."""

    def __init__(self, jobs: JobQueue, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 options: ServerOptions = ServerOptions(), access_log: bool = False):
        hosts = hosts_of(host)
        for each in hosts:
            check_exposure(each, options.api_key)
        self.jobs = jobs
        self.host = hosts[0]
        self.sockets = bind_all(hosts, port)
        self.port = self.sockets[0].getsockname()[1]
        config = uvicorn.Config(create_app(jobs, options), log_level="info" if access_log else "warning",
                                access_log=access_log, lifespan="off", timeout_graceful_shutdown=2,
                                http=HeaderDeadlineProtocol)   # a deadline for request headers (protocol.py)
        self._server = _Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def run(self) -> None:
        """Serve until interrupted (Ctrl-C); the caller stops the job queue afterwards."""
        self._server.run(sockets=self.sockets)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="quickdraft-http", daemon=True)
        self._thread.start()
        while not self._server.started and self._thread.is_alive():
            threading.Event().wait(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self.close()

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
