"""The daemon's event stream, ``GET /v1/events`` (Server-Sent Events)."""

from __future__ import annotations

import http.client
import threading
import time
from typing import Iterator

from ._http import Stream, Transport
from .errors import NetworkError, SandpitError
from .types import Event

__all__ = ["EventStream"]

_RETRY_STATUSES = frozenset({429, 502, 503, 504})


class EventStream:
    """Iterates the daemon's events as they happen.

    The stream is connected when the object is made: an event of anything
    done after that is delivered. A dropped connection (or a 429, 502, 503,
    504 on reconnecting) is retried with the client's backoff, counted from
    the last successful connection; changes made while it was down are not
    replayed, so list to catch up. ``close()``, from any thread, ends the
    iteration.
    """

    def __init__(self, transport: Transport) -> None:
        self._t = transport
        self._lock = threading.Lock()
        self._closed = False
        self._last_id: str | None = None
        self._stream: Stream | None = self._open()
        # How many times the stream has been connected: 1 at first, one more
        # after each successful reconnect.
        self.connections = 1

    def _open(self) -> Stream:
        headers = {"Accept": "text/event-stream"}
        if self._last_id is not None:
            headers["Last-Event-ID"] = self._last_id
        return self._t.open_stream("GET", "/v1/events", headers=headers)

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        failures = 0
        while True:
            with self._lock:
                if self._closed:
                    raise StopIteration
                stream = self._stream
            if stream is not None:
                try:
                    ev = self._next_event(stream)
                except (OSError, ValueError, http.client.HTTPException):
                    ev = None
                if ev is not None:
                    return ev
                # The stream ended or was cut: reconnect, unless we were closed.
                stream.close()
                with self._lock:
                    self._stream = None
            with self._lock:
                if self._closed:
                    raise StopIteration
            failures += 1
            time.sleep(self._t.policy.backoff(failures + 1, None))
            try:
                fresh = self._open()
            except NetworkError:
                if failures >= self._t.policy.max_attempts:
                    raise
                continue
            except SandpitError as e:
                if e.status not in _RETRY_STATUSES or failures >= self._t.policy.max_attempts:
                    raise
                continue
            with self._lock:
                if self._closed:
                    fresh.close()
                    raise StopIteration
                self._stream = fresh
                self.connections += 1
            failures = 0

    def _next_event(self, stream: Stream) -> Event | None:
        """Reads one event; None at the end of the stream."""
        name = ""
        event_id: str | None = None
        data: list[str] = []
        while True:
            raw = stream.readline()
            if not raw:
                return None
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line == "":
                if data:
                    if event_id is not None:
                        self._last_id = event_id
                    return Event.from_sse(name, event_id, "\n".join(data))
                name, data = "", []
                continue
            if line.startswith(":"):
                continue  # a comment: the subscription marker or a keep-alive
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "data":
                data.append(value)
            elif field == "event":
                name = value
            elif field == "id" and "\0" not in value:
                event_id = value

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
