"""The agent protocol (Connect RPC) in its JSON form, on the standard library.

The daemon proxies ``/v1/sandboxes/{id}/agent/<service>/<method>`` to the
sandbox's agent and adds the agent's own credential; the caller shows only
its API token. A unary call is a POST of ``application/json``; a server
stream is a POST of ``application/connect+json`` whose body, both ways, is a
sequence of envelopes: one flags byte, a 4-byte big-endian length, then the
JSON message. The last envelope of an answer has flag 0x02 and carries
``{"error": {...}}`` when the call failed.
"""

from __future__ import annotations

import http.client
import json
import struct
from typing import Any, Iterator

from ._http import Stream, Transport
from .errors import NetworkError, SandpitError, error_for

__all__ = ["unary", "ServerStream", "connect_error"]

_END_STREAM = 0x02
_COMPRESSED = 0x01
# Connect's codes, and the HTTP statuses the protocol pairs them with.
_CODE_STATUS = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}
# The SDK's names for the codes the REST API names too.
_CODE_NAME = {"deadline_exceeded": "timeout", "invalid_argument": "bad_request", "unauthenticated": "unauthorized"}


def connect_error(err: Any) -> SandpitError:
    """Maps a Connect error object ``{code, message}`` to the typed error of its code."""
    code = str(err.get("code", "unknown")) if isinstance(err, dict) else "unknown"
    message = str(err.get("message", "")) if isinstance(err, dict) else ""
    status = _CODE_STATUS.get(code, 500)
    return error_for(status, _CODE_NAME.get(code, code), message or code)


def unary(transport: Transport, path: str, msg: dict[str, Any], *, retry: bool, timeout: float | None = None) -> dict[str, Any]:
    """Calls a unary method; retried (when ``retry``) like a REST read."""
    res = transport.request(
        "POST",
        path,
        body=json.dumps(msg, separators=(",", ":")).encode(),
        content_type="application/json",
        headers={"Connect-Protocol-Version": "1"},
        retry=retry,
        timeout=timeout,
    )
    out = res.json()
    return out if isinstance(out, dict) else {}


class ServerStream:
    """A server-streaming call: iterate its messages as they arrive."""

    def __init__(self, transport: Transport, path: str, msg: dict[str, Any], *, timeout: float | None = None) -> None:
        payload = json.dumps(msg, separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/connect+json",
            "Connect-Protocol-Version": "1",
        }
        if timeout is not None:
            headers["Connect-Timeout-Ms"] = str(max(1, int(timeout * 1000)))
        self._path = path
        self._stream: Stream = transport.open_stream("POST", path, body=struct.pack(">BI", 0, len(payload)) + payload, headers=headers)
        self.done = False

    def messages(self) -> Iterator[dict[str, Any]]:
        """Yields each message; raises the call's typed error from its end-stream envelope."""
        try:
            while not self.done:
                prefix = self._read(5, allow_eof=True)
                if not prefix:
                    if self._stream.closed:
                        return
                    raise NetworkError(f"{self._path}: the stream ended without its end-stream message", code="network")
                flags, length = struct.unpack(">BI", prefix)
                data = self._read(length)
                if flags & _COMPRESSED:
                    raise NetworkError(f"{self._path}: a compressed message, which was not asked for", code="protocol")
                body = json.loads(data) if data else {}
                if flags & _END_STREAM:
                    self.done = True
                    if isinstance(body, dict) and body.get("error"):
                        raise connect_error(body["error"])
                    return
                yield body if isinstance(body, dict) else {}
        finally:
            if self.done:
                self.close()

    def _read(self, n: int, allow_eof: bool = False) -> bytes:
        try:
            b = self._stream.read_exact(n)
        except (OSError, ValueError, http.client.HTTPException) as e:
            # A stream closed by the caller (from another thread) ends quietly.
            if self._stream.closed:
                return b""
            raise NetworkError(f"{self._path}: stream cut: {e}", code="network") from e
        if len(b) < n and not (allow_eof and not b):
            if self._stream.closed:
                return b""
            raise NetworkError(f"{self._path}: stream cut in the middle of a message", code="network")
        return b

    def close(self) -> None:
        self._stream.close()
