"""The error a client gets: an error object with an HTTP status, in OpenAI's shape, with the types
llama-server uses (authentication_error, exceed_context_size_error, not_supported_error, ...)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class ApiError(Exception):
    """An error a client gets as an OpenAI error object with an HTTP status."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    retry_after: int | None = None
    extra: dict = field(default_factory=dict)   # further fields of the error object (llama-server's n_ctx, ...)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
                | self.extra}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
