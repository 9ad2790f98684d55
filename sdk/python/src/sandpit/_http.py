"""The HTTP transport: one request per connection, retries with one
Idempotency-Key per logical call, and the typed error of every failed answer.

Only the standard library is used (http.client), so the SDK installs where no
package index is reachable.
"""

from __future__ import annotations

import email.utils
import http.client
import json as jsonlib
import random
import socket
import ssl
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

from .errors import NetworkError, SandpitError, code_for_status, error_for

__all__ = ["RetryPolicy", "Response", "Transport", "Stream", "parse_error"]

USER_AGENT = "sandpit-sdk-python/0.1.0"

# The statuses another attempt may cure: the daemon was busy, restarting or
# electing a leader. A full port pool and a reached quota are 503 and 429 too,
# but no retry cures them.
_RETRY_STATUSES = frozenset({429, 502, 503, 504})
_NOT_RETRIED_CODES = frozenset({"port_pool_exhausted", "quota_exceeded"})

# Written with Union and Optional: a type alias is evaluated at import, and
# Python 3.9 has no `|` between generic aliases.
Query = Optional[Union[Sequence[Tuple[str, str]], Mapping[str, str]]]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds the retries of one call.

    ``max_attempts`` counts the first attempt (1 turns retries off); the wait
    before attempt n is a random time up to ``base_delay * 2**(n-2)`` seconds,
    capped at ``max_delay``, or the daemon's Retry-After when it named one
    (capped the same way).
    """

    max_attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 3.0

    def __post_init__(self) -> None:
        # A zero or negative delay would hammer a struggling daemon, which is
        # what the backoff exists to avoid.
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if self.base_delay <= 0 or self.max_delay <= 0:
            raise ValueError("RetryPolicy delays must be positive")

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """The wait before attempt number ``attempt`` (2 for the first retry)."""
        if retry_after is not None:
            return min(retry_after, self.max_delay)
        ceiling = min(self.max_delay, self.base_delay * 2 ** min(attempt - 2, 30))
        return random.uniform(0, ceiling) + 0.001


@dataclass
class Response:
    """A successful (2xx) answer, read whole."""

    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return jsonlib.loads(self.body) if self.body else None


class _Failure(Exception):
    """One failed attempt, and whether another may cure it."""

    def __init__(self, error: SandpitError, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.retryable = retryable
        self.retry_after = retry_after


def parse_retry_after(value: str | None) -> float | None:
    """Reads Retry-After: delay seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        secs = float(value)
        return secs if secs >= 0 else None
    except ValueError:
        pass
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, at.timestamp() - time.time())


def parse_error(status: int, body: bytes, retry_after: float | None = None) -> SandpitError:
    """Reads the native error body, or the agent's (Connect's ``{code, message}``), or neither."""
    text = body.decode("utf-8", "replace").strip()
    code = ""
    message = text or f"HTTP {status}"
    try:
        v = jsonlib.loads(text) if text else None
    except ValueError:
        v = None  # not JSON: the text is the message
    if isinstance(v, dict):
        err = v.get("error")
        if isinstance(err, dict) and isinstance(err.get("code"), str):
            code = err["code"]
            if isinstance(err.get("message"), str):
                message = err["message"]
        elif isinstance(v.get("code"), str) and isinstance(v.get("message"), str):
            # The agent's Connect error: its code names the kind, the status says the rest.
            message = v["message"]
        elif isinstance(v.get("message"), str):
            message = v["message"]
    return error_for(status, code or code_for_status(status), message, retry_after)


class Stream:
    """An open streaming answer: read it as it arrives, close it when done.

    ``close`` may be called from another thread to end a blocked read.
    """

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self.response = resp
        self.status = resp.status
        self.headers = resp.headers
        self.closed = False

    def read_exact(self, n: int) -> bytes:
        """Reads n bytes; fewer only at the end of the stream."""
        out = bytearray()
        while len(out) < n:
            chunk = self.response.read(n - len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def readline(self) -> bytes:
        return self.response.readline()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # Shutting the socket down first wakes a reader blocked in another
        # thread; close alone may leave it waiting.
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._conn.close()
        # The answer holds its own reference to the socket: it closes only
        # when both are closed.
        try:
            self.response.close()
        except (OSError, ValueError):
            pass

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport:
    """Sends the native API's requests.

    A call marked ``retry`` is retried on network errors and on 429, 502, 503
    and 504 with capped exponential backoff and full jitter (or the daemon's
    Retry-After); a ``keyed`` call carries one Idempotency-Key on all its
    attempts, so the daemon runs it at most once however many times it
    arrives.
    """

    def __init__(self, base_url: str, token: str, policy: RetryPolicy, timeout: float) -> None:
        if "://" not in base_url:
            base_url = "http://" + base_url
        u = urllib.parse.urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"sandpit: api_url {base_url!r} is not an http(s) URL")
        self.base_url = urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, "", ""))
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path
        self.token = token
        self.policy = policy
        self.timeout = timeout

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        h = {"Authorization": f"Bearer {self.token}", "User-Agent": USER_AGENT}
        if extra:
            h.update(extra)
        return h

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _target(self, path: str, query: Query) -> str:
        target = self._prefix + path
        if query:
            items = list(query.items()) if isinstance(query, Mapping) else list(query)
            if items:
                target += "?" + urllib.parse.urlencode(items)
        return target

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query = None,
        json: Any = None,
        body: bytes | None = None,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        retry: bool = False,
        keyed: bool = False,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Response:
        """Sends one logical call, retried as the flags allow; raises its typed error."""
        key = (idempotency_key or str(uuid.uuid4())) if keyed else None
        if json is not None:
            body = jsonlib.dumps(json, separators=(",", ":")).encode()
            content_type = "application/json"
        attempts = self.policy.max_attempts if retry else 1
        last: _Failure | None = None
        for attempt in range(1, attempts + 1):
            if last is not None:
                time.sleep(self.policy.backoff(attempt, last.retry_after))
            try:
                return self._once(method, path, query, body, content_type, headers, key, timeout)
            except _Failure as f:
                last = f
                if not f.retryable:
                    break
        assert last is not None
        raise last.error

    def _once(
        self,
        method: str,
        path: str,
        query: Query,
        body: bytes | None,
        content_type: str | None,
        extra: Mapping[str, str] | None,
        key: str | None,
        timeout: float | None,
    ) -> Response:
        h = self.headers(extra)
        if content_type:
            h["Content-Type"] = content_type
        if key is not None:
            h["Idempotency-Key"] = key
        conn = self._connect(self.timeout if timeout is None else timeout)
        try:
            try:
                conn.request(method, self._target(path, query), body=body, headers=h)
                resp = conn.getresponse()
                # The body is read inside the try: an answer cut in the
                # middle is as lost as one cut before it.
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise _Failure(NetworkError(f"{method} {path}: {_describe(e)}", code="network"), True) from e
        finally:
            conn.close()
        if resp.status < 300:
            return Response(resp.status, resp.headers, data)
        ra = parse_retry_after(resp.headers.get("Retry-After"))
        err = parse_error(resp.status, data, ra)
        retryable = resp.status in _RETRY_STATUSES and err.code not in _NOT_RETRIED_CODES
        raise _Failure(err, retryable, ra)

    def open_stream(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        query: Query = None,
        read_timeout: float | None = None,
    ) -> Stream:
        """Sends one request (never retried) and returns its streaming answer once its headers arrived.

        A non-2xx answer raises its typed error.
        """
        conn = self._connect(self.timeout)
        try:
            conn.request(method, self._target(path, query), body=body, headers=self.headers(headers))
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise NetworkError(f"{method} {path}: {_describe(e)}", code="network") from e
        if resp.status >= 300:
            try:
                data = resp.read()
            except (OSError, http.client.HTTPException):
                data = b""
            conn.close()
            raise parse_error(resp.status, data, parse_retry_after(resp.headers.get("Retry-After")))
        if conn.sock is not None:
            # A stream may be quiet for long (a command that prints nothing);
            # the connect timeout must not end it.
            conn.sock.settimeout(read_timeout)
        return Stream(conn, resp)


def _describe(e: BaseException) -> str:
    return str(e) or type(e).__name__
