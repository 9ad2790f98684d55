"""Python SDK of Sandpit's native API (``/v1``).

    from sandpit import Sandpit

    sandpit = Sandpit("http://127.0.0.1:7420", token)
    sb = sandpit.create(labels={"job": "demo"})
    print(sb.exec("echo hello").stdout)
    sb.delete()

Every mutating call carries one Idempotency-Key for all its retries, so a
retry never makes a second resource. ``sandpit.aio.AsyncSandpit`` is the
asyncio client.
"""

from ._http import RetryPolicy
from .aio import AsyncEventStream, AsyncExecStream, AsyncFiles, AsyncSandbox, AsyncSandpit, AsyncTokens
from .client import ExecStream, Files, Sandbox, SandboxList, Sandpit, Tokens
from .errors import (
    AuthenticationError,
    ConflictError,
    ExecError,
    HostnameConflictError,
    SandboxPausedError,
    SandboxStoppedError,
    IdempotencyKeyMismatchError,
    InvalidRequestError,
    NameConflictError,
    NetworkError,
    NotFoundError,
    PermissionDeniedError,
    PortPoolExhaustedError,
    RateLimitedError,
    SandpitError,
    SandpitTimeoutError,
    ServerError,
)
from .events import EventStream
from .types import (
    CustomDomain,
    Event,
    ExecChunk,
    ExecExit,
    ExecResult,
    ExposedPort,
    FileEntry,
    Lifecycle,
    Network,
    SandboxInfo,
    SandboxPage,
    Token,
)

__version__ = "0.1.0"

__all__ = [
    "Sandpit",
    "AsyncSandpit",
    "RetryPolicy",
    "Sandbox",
    "AsyncSandbox",
    "SandboxList",
    "Files",
    "AsyncFiles",
    "Tokens",
    "AsyncTokens",
    "ExecStream",
    "AsyncExecStream",
    "EventStream",
    "AsyncEventStream",
    "SandboxInfo",
    "SandboxPage",
    "Network",
    "Lifecycle",
    "ExecResult",
    "ExecChunk",
    "ExecExit",
    "ExposedPort",
    "CustomDomain",
    "FileEntry",
    "Event",
    "Token",
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
    "SandboxPausedError",
    "SandboxStoppedError",
    "RateLimitedError",
    "ServerError",
    "PortPoolExhaustedError",
    "SandpitTimeoutError",
    "ExecError",
    "__version__",
]
