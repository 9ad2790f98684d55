"""The synchronous client of the native API."""

from __future__ import annotations

import base64
import math
import os
import urllib.parse
from typing import Any, Iterator, Literal, Mapping, Sequence

from ._connect import ServerStream, unary
from ._http import RetryPolicy, Transport
from .errors import ConflictError, ExecError, SandpitError
from .events import EventStream
from .types import (
    CustomDomain,
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
    b64decode,
)

__all__ = ["Sandpit", "Sandbox", "Files", "Tokens", "ExecStream", "SandboxList"]

DEFAULT_ADDR = "127.0.0.1:7420"


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _argv(cmd: str | Sequence[str]) -> list[str]:
    """A string runs under ``/bin/sh -c``; a sequence is the program and its arguments."""
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
    if not argv or not argv[0]:
        raise ValueError("exec: empty command")
    return argv


class Sandpit:
    """A client of one daemon's native API (``/v1``).

    ``api_url`` is ``http://host:port`` or ``host:port`` (default:
    ``SANDPIT_ADDR``, else ``127.0.0.1:7420``); ``token`` the API token
    (default: ``SANDPIT_TOKEN``). Every mutating call carries an
    Idempotency-Key generated once per call and reused on each retry, so a
    retried call never makes a second sandbox or takes a second port; pass
    ``idempotency_key=`` to make a call safe to repeat across processes.
    ``retry=RetryPolicy(max_attempts=1)`` turns retries off; ``timeout`` is
    the socket timeout of each request in seconds.
    """

    def __init__(
        self,
        api_url: str | None = None,
        token: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float = 120.0,
    ) -> None:
        api_url = api_url or os.environ.get("SANDPIT_ADDR") or DEFAULT_ADDR
        token = token or os.environ.get("SANDPIT_TOKEN")
        if not token:
            raise ValueError("sandpit: no token: pass token= or set SANDPIT_TOKEN")
        self._t = Transport(api_url, token, retry or RetryPolicy(), timeout)
        self.tokens = Tokens(self._t)

    @property
    def api_url(self) -> str:
        return self._t.base_url

    def create(
        self,
        *,
        image: str | None = None,
        template: str | None = None,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        cpu: float | None = None,
        memory_mb: int | None = None,
        timeout: float | None = None,
        network: Network | Mapping[str, Any] | None = None,
        lifecycle: Lifecycle | None = None,
        idempotency_key: str | None = None,
    ) -> "Sandbox":
        """Creates a sandbox and returns it once it is running.

        ``cpu``, ``memory_mb`` and ``timeout`` (the sandbox's lifetime in
        seconds, rounded up) are its limits; left out, the daemon's defaults
        apply. A taken ``name`` raises NameConflictError.
        """
        body: dict[str, Any] = {}
        if image:
            body["image"] = image
        if template:
            body["template"] = template
        if name:
            body["name"] = name
        if env:
            body["env"] = dict(env)
        if labels:
            body["labels"] = dict(labels)
        if cpu:
            body["cpu"] = cpu
        if memory_mb:
            body["memory_mb"] = int(memory_mb)
        if timeout:
            body["timeout_s"] = int(math.ceil(timeout))
        if network is not None:
            body["network"] = network.to_wire() if isinstance(network, Network) else dict(network)
        if lifecycle is not None:
            body["lifecycle"] = lifecycle.to_wire()
        res = self._t.request("POST", "/v1/sandboxes", json=body, retry=True, keyed=True, idempotency_key=idempotency_key)
        return Sandbox(self._t, SandboxInfo.from_wire(res.json()))

    def get(self, sandbox: str) -> "Sandbox":
        """Returns a sandbox by id; a missing one raises NotFoundError."""
        res = self._t.request("GET", f"/v1/sandboxes/{_q(sandbox)}", retry=True)
        return Sandbox(self._t, SandboxInfo.from_wire(res.json()))

    def list(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        states: Sequence[str] | None = None,
        page_size: int | None = None,
    ) -> "SandboxList":
        """Lists sandboxes, fetching pages as the iteration reaches them.

        ``for sb in sandpit.list(labels={"job": "ci"})``; ``.pages()``
        iterates page by page, ``.page(token)`` fetches one.
        """
        return SandboxList(self._t, dict(labels or {}), list(states or []), page_size)

    def delete(self, sandbox: str, *, idempotency_key: str | None = None) -> None:
        """Deletes a sandbox by id, with its container."""
        self._t.request("DELETE", f"/v1/sandboxes/{_q(sandbox)}", retry=True, keyed=True, idempotency_key=idempotency_key)

    def events(self) -> EventStream:
        """Opens the daemon's event stream (connected on return): ``for ev in sandpit.events()``."""
        return EventStream(self._t)


class SandboxList:
    """An iterable of sandboxes over the listing's pages."""

    def __init__(self, t: Transport, labels: dict[str, str], states: list[str], page_size: int | None) -> None:
        self._t = t
        self._labels = labels
        self._states = states
        self._page_size = page_size

    def page(self, page_token: str | None = None) -> SandboxPage:
        q: list[tuple[str, str]] = [("label", f"{k}={v}") for k, v in self._labels.items()]
        if self._states:
            q.append(("state", ",".join(self._states)))
        if self._page_size:
            q.append(("limit", str(self._page_size)))
        if page_token:
            q.append(("page_token", page_token))
        w = self._t.request("GET", "/v1/sandboxes", query=q, retry=True).json()
        return SandboxPage([SandboxInfo.from_wire(s) for s in w.get("sandboxes") or []], w.get("next_page_token") or None)

    def pages(self) -> Iterator[list["Sandbox"]]:
        token: str | None = None
        while True:
            p = self.page(token)
            yield [Sandbox(self._t, info) for info in p.sandboxes]
            token = p.next_page_token
            if not token:
                return

    def __iter__(self) -> Iterator["Sandbox"]:
        for page in self.pages():
            yield from page


class Sandbox:
    """A sandbox. ``info`` is a snapshot of its fields; ``refresh()`` reloads it."""

    def __init__(self, t: Transport, info: SandboxInfo) -> None:
        self._t = t
        self.info = info
        self.files = Files(self)

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, name={self.name!r}, state={self.state!r})"

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def name(self) -> str | None:
        return self.info.name

    @property
    def state(self) -> str:
        return self.info.state

    @property
    def labels(self) -> dict[str, str]:
        return self.info.labels

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{_q(self.id)}{suffix}"

    def _agent(self, method: str) -> str:
        return self._path(f"/agent/{method}")

    def refresh(self) -> "Sandbox":
        self.info = SandboxInfo.from_wire(self._t.request("GET", self._path(), retry=True).json())
        return self

    # Lifecycle: each is keyed, so a retry changes the state once.

    def delete(self, *, idempotency_key: str | None = None) -> None:
        self._t.request("DELETE", self._path(), retry=True, keyed=True, idempotency_key=idempotency_key)

    def start(self, *, idempotency_key: str | None = None) -> "Sandbox":
        return self._lifecycle("/start", None, idempotency_key)

    def stop(self, *, idempotency_key: str | None = None) -> "Sandbox":
        return self._lifecycle("/stop", None, idempotency_key)

    def pause(self, *, mode: Literal["memory", "filesystem"] | None = None, idempotency_key: str | None = None) -> "Sandbox":
        """Pauses the sandbox: ``memory`` (default) freezes its processes, ``filesystem`` keeps only its files."""
        return self._lifecycle("/pause", {"mode": mode} if mode else {}, idempotency_key)

    def resume(self, *, idempotency_key: str | None = None) -> "Sandbox":
        return self._lifecycle("/resume", None, idempotency_key)

    def _lifecycle(self, suffix: str, body: dict[str, Any] | None, key: str | None) -> "Sandbox":
        res = self._t.request("POST", self._path(suffix), json=body, retry=True, keyed=True, idempotency_key=key)
        self.info = SandboxInfo.from_wire(res.json())
        return self

    def update_network(self, network: Network) -> "Sandbox":
        """Replaces the egress policy (the whole policy: fields left out are cleared)."""
        # A PUT of the whole policy is idempotent by nature: retried without a key.
        res = self._t.request("PUT", self._path("/network"), json=network.to_wire(), retry=True)
        self.info = SandboxInfo.from_wire(res.json())
        return self

    # Exec: never retried, since running a command twice is not running it once.

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Runs a command to its end and returns its exit code and output.

        A string runs under ``/bin/sh -c``; a sequence is the program and its
        arguments, run without a shell. A failing command is an ExecResult
        with its exit code, not an exception.
        """
        argv = _argv(cmd)
        body: dict[str, Any] = {"cmd": argv[0]}
        if argv[1:]:
            body["args"] = argv[1:]
        if env:
            body["env"] = dict(env)
        if cwd:
            body["cwd"] = cwd
        if timeout:
            body["timeout_s"] = int(math.ceil(timeout))
        sock_timeout = None if timeout is None else max(self._t.timeout, timeout + 30)
        res = self._t.request("POST", self._path("/exec"), json=body, retry=False, timeout=sock_timeout)
        return ExecResult.from_wire(res.json())

    def exec_stream(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bool = False,
    ) -> "ExecStream":
        """Starts a command and streams its output as it comes.

        Returns once the command started (``stream.pid``); iterating yields
        ExecChunk for each piece of stdout or stderr, in order, then one
        ExecExit. ``stdin=True`` keeps the command's stdin open for
        ``send_stdin`` and ``close_stdin``. ``timeout`` (seconds) kills the
        command and raises SandpitTimeoutError.
        """
        argv = _argv(cmd)
        process: dict[str, Any] = {"cmd": argv[0], "args": argv[1:], "envs": dict(env or {})}
        if cwd:
            process["cwd"] = cwd
        msg: dict[str, Any] = {"process": process}
        if stdin:
            msg["stdin"] = True
        return ExecStream(self, ServerStream(self._t, self._agent("process.Process/Start"), msg, timeout=timeout))

    # Ports and custom domains.

    def expose_port(
        self, port: int, *, protocol: Literal["http", "tcp"] | None = None, idempotency_key: str | None = None
    ) -> ExposedPort:
        """Exposes a port: ``http`` (default) through the preview proxy, ``tcp`` on a host port.

        Exposing it again, or a retry of a call whose answer was lost,
        returns the same exposure with ``reused=True``.
        """
        body: dict[str, Any] = {"port": int(port)}
        if protocol:
            body["protocol"] = protocol
        res = self._t.request("POST", self._path("/ports"), json=body, retry=True, keyed=True, idempotency_key=idempotency_key)
        return ExposedPort.from_wire(res.json())

    def ports(self) -> list[ExposedPort]:
        w = self._t.request("GET", self._path("/ports"), retry=True).json()
        return [ExposedPort.from_wire(p) for p in w.get("ports") or []]

    def unexpose_port(self, port: int, *, idempotency_key: str | None = None) -> None:
        self._t.request("DELETE", self._path(f"/ports/{int(port)}"), retry=True, keyed=True, idempotency_key=idempotency_key)

    def add_custom_domain(self, hostname: str, port: int, *, idempotency_key: str | None = None) -> CustomDomain:
        """Binds a hostname to a port; another sandbox's hostname raises HostnameConflictError."""
        res = self._t.request(
            "POST", self._path("/custom-domains"), json={"hostname": hostname, "port": int(port)},
            retry=True, keyed=True, idempotency_key=idempotency_key,
        )
        return CustomDomain.from_wire(res.json())

    def custom_domains(self) -> list[CustomDomain]:
        w = self._t.request("GET", self._path("/custom-domains"), retry=True).json()
        return [CustomDomain.from_wire(d) for d in w.get("custom_domains") or []]

    def remove_custom_domain(self, hostname: str, *, idempotency_key: str | None = None) -> None:
        self._t.request(
            "DELETE", self._path(f"/custom-domains/{_q(hostname)}"), retry=True, keyed=True, idempotency_key=idempotency_key
        )


class ExecStream:
    """A running command's output stream (see Sandbox.exec_stream).

    ``for ev in stream`` yields ExecChunk and finally ExecExit; afterwards
    ``exit_code`` is set. ``close()`` (also from another thread) stops
    reading; the command keeps running unless ``kill()`` ends it.
    """

    def __init__(self, sandbox: Sandbox, call: ServerStream) -> None:
        self._sb = sandbox
        self._call = call
        self._messages = call.messages()
        self._pending: list[dict[str, Any]] = []
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.status: str = ""
        # The first event names the process: read it now, so that stdin and
        # signals can be sent before any output is read.
        for msg in self._messages:
            start = (msg.get("event") or {}).get("start")
            if start is not None:
                self.pid = int(start.get("pid", 0))
                break
            self._pending.append(msg)
            if "end" in (msg.get("event") or {}):
                break

    def __iter__(self) -> Iterator[ExecChunk | ExecExit]:
        while True:
            if self._pending:
                msg = self._pending.pop(0)
            else:
                try:
                    msg = next(self._messages)
                except StopIteration:
                    break
            ev = msg.get("event") or {}
            if "data" in ev:
                d = ev["data"] or {}
                if "stdout" in d:
                    yield ExecChunk("stdout", b64decode(d["stdout"]))
                elif "stderr" in d:
                    yield ExecChunk("stderr", b64decode(d["stderr"]))
            elif "end" in ev:
                end = ev["end"] or {}
                if not end.get("exited") and not end.get("status") and end.get("error"):
                    # No process state at all: the command never ran.
                    raise ExecError(f"exec: {end['error']}", code="exec_failed")
                # A command ended by a signal has exit code -1 and a status
                # naming the signal ("signal: killed").
                self.exit_code = int(end.get("exitCode", 0))
                self.status = str(end.get("status", ""))
                # Read the end-stream envelope now, which closes the
                # connection, whether or not the caller reads on.
                for _ in self._messages:
                    pass
                self._call.close()
                yield ExecExit(self.exit_code, self.status)
                return
        if self.exit_code is None and not self._call.done:
            return  # closed by the caller
        if self.exit_code is None:
            raise ExecError("exec: the stream ended without an exit status", code="exec_failed")

    def wait(self) -> ExecResult:
        """Reads the rest of the stream and returns the command's outcome."""
        out, err = bytearray(), bytearray()
        for ev in self:
            if isinstance(ev, ExecChunk):
                (out if ev.stream == "stdout" else err).extend(ev.data)
        if self.exit_code is None:
            raise ExecError("exec: the stream was closed before the command ended", code="exec_failed")
        return ExecResult(self.exit_code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def _selector(self) -> dict[str, Any]:
        if not self.pid:
            raise ConflictError("exec: the process has no pid (it ended before it started?)", status=409, code="not_running")
        return {"pid": self.pid}

    def send_stdin(self, data: bytes | str) -> None:
        """Writes to the command's stdin (the exec must have been started with ``stdin=True``)."""
        b = data.encode() if isinstance(data, str) else bytes(data)
        # Not retried: a retry could write the bytes twice.
        unary(
            self._sb._t, self._sb._agent("process.Process/SendInput"),
            {"process": self._selector(), "input": {"stdin": base64.b64encode(b).decode()}}, retry=False,
        )

    def close_stdin(self) -> None:
        """Closes the command's stdin (it reads end of file)."""
        unary(self._sb._t, self._sb._agent("process.Process/CloseStdin"), {"process": self._selector()}, retry=True)

    def kill(self) -> None:
        """Sends SIGKILL to the command."""
        unary(
            self._sb._t, self._sb._agent("process.Process/SendSignal"),
            {"process": self._selector(), "signal": "SIGNAL_SIGKILL"}, retry=True,
        )

    def close(self) -> None:
        self._call.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Files:
    """Files inside a sandbox: whole-file reads and writes over ``/files``,
    listings through the agent's Filesystem service. Paths are absolute, or
    relative to the sandbox user's home directory."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def read(self, path: str) -> bytes:
        """Reads a whole file; a missing one raises NotFoundError."""
        return self._sb._t.request("GET", self._sb._path("/files"), query=[("path", path)], retry=True).body

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: bytes | str) -> None:
        """Writes a whole file, creating missing parent directories.

        Retried without a key: writing the same bytes twice leaves the same file.
        """
        b = data.encode() if isinstance(data, str) else bytes(data)
        self._sb._t.request(
            "PUT", self._sb._path("/files"), query=[("path", path)], body=b,
            content_type="application/octet-stream", retry=True,
        )

    def list(self, path: str, *, depth: int = 1) -> list[FileEntry]:
        """Lists a directory; ``depth`` > 1 descends into subdirectories."""
        w = unary(self._sb._t, self._sb._agent("filesystem.Filesystem/ListDir"), {"path": path, "depth": depth}, retry=True)
        return [FileEntry.from_wire(e) for e in w.get("entries") or []]

    def stat(self, path: str) -> FileEntry:
        """Describes one path; a missing one raises NotFoundError."""
        w = unary(self._sb._t, self._sb._agent("filesystem.Filesystem/Stat"), {"path": path}, retry=True)
        if not w.get("entry"):
            raise SandpitError(f"stat {path}: empty answer", code="internal")
        return FileEntry.from_wire(w["entry"])

    def make_dir(self, path: str) -> None:
        """Makes a directory and its parents; an existing one is fine."""
        try:
            unary(self._sb._t, self._sb._agent("filesystem.Filesystem/MakeDir"), {"path": path}, retry=True)
        except ConflictError:
            pass  # already_exists: the directory is there, as asked

    def remove(self, path: str) -> None:
        """Removes a file or a directory tree."""
        unary(self._sb._t, self._sb._agent("filesystem.Filesystem/Remove"), {"path": path}, retry=True)


class Tokens:
    """Personal access tokens (admin only; docs/tokens.md).

    Creating a token is not keyed: the daemon will not store an answer that
    holds a secret in clear, so a create is sent once, and a retry of it
    would be refused by the unique name (409). A token whose creation answer
    was lost is revoked and made again.
    """

    def __init__(self, t: Transport) -> None:
        self._t = t

    def create(
        self,
        name: str,
        *,
        owner: str | None = None,
        scopes: Sequence[str] | None = None,
        expires_in: float | None = None,
    ) -> Token:
        """Creates a token; its ``secret`` is in this answer only."""
        body: dict[str, Any] = {"name": name}
        if owner:
            body["owner"] = owner
        if scopes:
            body["scopes"] = list(scopes)
        if expires_in:
            body["expires_in_s"] = int(math.ceil(expires_in))
        return Token.from_wire(self._t.request("POST", "/v1/tokens", json=body).json())

    def list(self, *, include_revoked: bool = False) -> list[Token]:
        q = [("include_revoked", "true")] if include_revoked else []
        w = self._t.request("GET", "/v1/tokens", query=q, retry=True).json()
        return [Token.from_wire(x) for x in w.get("tokens") or []]

    def revoke(self, name: str) -> Token:
        """Revokes a token by name or prefix."""
        return Token.from_wire(self._t.request("DELETE", f"/v1/tokens/{_q(name)}").json())
