"""Typed errors.

Every error the SDK raises for an answer of the daemon is a SandpitError
carrying the HTTP status and the daemon's stable code and message (the body
``{"error": {"code": ..., "message": ...}}``). The cases a caller is expected
to handle have their own class, so that ``except NotFoundError`` is enough to
tell them apart; the classes follow the HTTP status first and the daemon's
code second (a ``name_conflict`` is a NameConflictError, which is a
ConflictError).
"""

from __future__ import annotations

__all__ = [
    "SandpitError",
    "NetworkError",
    "InvalidRequestError",
    "IdempotencyKeyMismatchError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "NameConflictError",
    "HostnameConflictError",
    "RateLimitedError",
    "ServerError",
    "PortPoolExhaustedError",
    "SandpitTimeoutError",
    "ExecError",
    "error_for",
]


class SandpitError(Exception):
    """An error answer of the daemon, or a failure to get one.

    ``status`` is the HTTP status (0 when there was no answer), ``code`` the
    daemon's machine-readable code (``name_conflict``, ``not_found``, ...) and
    ``message`` its human-readable message.
    """

    def __init__(self, message: str, *, status: int = 0, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        if self.status:
            return f"{self.status} {self.code}: {self.message}"
        return f"{self.code}: {self.message}" if self.code else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r})"


class NetworkError(SandpitError):
    """The daemon could not be reached, after every retry the policy allowed."""


class InvalidRequestError(SandpitError):
    """400 or 422: the request is malformed or invalid; nothing was done."""


class IdempotencyKeyMismatchError(InvalidRequestError):
    """422 ``idempotency_key_mismatch``: the key was already used for a different request."""


class AuthenticationError(SandpitError):
    """401: the token is missing, wrong, revoked or expired."""


class PermissionDeniedError(SandpitError):
    """403: the token is valid but its scopes do not allow the call."""


class NotFoundError(SandpitError):
    """404: no such sandbox, exposure, domain, token or file."""


class ConflictError(SandpitError):
    """409: the call conflicts with the current state (a taken name, a sandbox not running, ...)."""


class NameConflictError(ConflictError):
    """409 ``name_conflict``: another sandbox already has this name."""


class HostnameConflictError(ConflictError):
    """409 ``hostname_conflict``: the custom domain is bound to another sandbox."""


class SandboxPausedError(ConflictError):
    """409 ``sandbox_paused``: the call needs a running sandbox and this one is paused; resume it."""


class SandboxStoppedError(ConflictError):
    """409 ``sandbox_stopped``: the call needs a running sandbox and this one is stopped; start it."""


class RateLimitedError(SandpitError):
    """429: too many requests (``rate_limited``) or an owner's quota reached (``quota_exceeded``).

    ``retry_after`` is the daemon's Retry-After in seconds, when it named one.
    """

    def __init__(self, message: str, *, status: int = 429, code: str = "", retry_after: float | None = None) -> None:
        super().__init__(message, status=status, code=code)
        self.retry_after = retry_after


class ServerError(SandpitError):
    """5xx: the daemon or something behind it (the engine, the sandbox's agent) failed."""


class PortPoolExhaustedError(ServerError):
    """503 ``port_pool_exhausted``: no host port is left for a TCP exposure. Never retried."""


class SandpitTimeoutError(SandpitError):
    """504 or ``timeout``: the call, or the command it ran, exceeded its deadline."""


class ExecError(SandpitError):
    """A command could not be run, or its stream ended without an exit status."""


def error_for(status: int, code: str, message: str, retry_after: float | None = None) -> SandpitError:
    """Builds the typed error of a non-2xx answer.

    The daemon's code decides where it names a more specific case; the
    status decides otherwise, which also covers answers without the native
    error body (the sandbox agent answers a missing file with a bare 404).
    """
    specific: dict[str, type[SandpitError]] = {
        "name_conflict": NameConflictError,
        "hostname_conflict": HostnameConflictError,
        "sandbox_paused": SandboxPausedError,
        "sandbox_stopped": SandboxStoppedError,
        "idempotency_key_mismatch": IdempotencyKeyMismatchError,
        "port_pool_exhausted": PortPoolExhaustedError,
        "timeout": SandpitTimeoutError,
    }
    cls = specific.get(code)
    if cls is None:
        if status == 429 or code in ("rate_limited", "quota_exceeded"):
            return RateLimitedError(message, status=status, code=code, retry_after=retry_after)
        if status in (400, 422):
            cls = InvalidRequestError
        elif status == 401:
            cls = AuthenticationError
        elif status == 403:
            cls = PermissionDeniedError
        elif status == 404:
            cls = NotFoundError
        elif status == 409:
            cls = ConflictError
        elif status == 504:
            cls = SandpitTimeoutError
        elif status >= 500:
            cls = ServerError
        else:
            cls = SandpitError
    return cls(message, status=status, code=code)


def code_for_status(status: int) -> str:
    """Names an answer that carried no code of its own."""
    return {
        400: "bad_request",
        401: "unauthorized",
        403: "forbidden",
        404: "not_found",
        409: "conflict",
        422: "unprocessable",
        429: "rate_limited",
    }.get(status, f"http_{status}")
