"""Wire types of the native API, as dataclasses with Python names.

Each ``from_wire`` reads the daemon's JSON (snake_case, RFC 3339 times) and
tolerates fields it does not know, so a newer daemon does not break an older
SDK.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

__all__ = [
    "Network",
    "Lifecycle",
    "SandboxInfo",
    "ExecResult",
    "ExecChunk",
    "ExecExit",
    "ExposedPort",
    "CustomDomain",
    "FileEntry",
    "Event",
    "Token",
    "SandboxPage",
    "parse_time",
]


def parse_time(s: Any) -> dt.datetime | None:
    """Parses an RFC 3339 time as Go and protobuf write it (nanoseconds, ``Z``)."""
    if not isinstance(s, str) or not s:
        return None
    s = s.replace("Z", "+00:00").replace("z", "+00:00")
    # fromisoformat takes at most six fractional digits before 3.11.
    if "." in s:
        head, _, rest = s.partition(".")
        digits = "".join(c for c in rest if c.isdigit())
        tz = rest[len(digits):]
        s = f"{head}.{digits[:6].ljust(6, '0')}{tz}"
    try:
        return dt.datetime.fromisoformat(s)
    except ValueError:
        return None


def _strs(v: Any) -> list[str]:
    return [str(x) for x in v] if isinstance(v, list) else []


def _map(v: Any) -> dict[str, str]:
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}


@dataclass
class Network:
    """A sandbox's egress policy (docs/egress.md): ``egress`` is ``all``, ``none`` or ``allowlist``."""

    egress: str | None = None
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    allow_domains: list[str] = field(default_factory=list)
    deny_domains: list[str] = field(default_factory=list)
    mode: str | None = None
    profiles: list[str] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in ("egress", "mode"):
            if getattr(self, k):
                out[k] = getattr(self, k)
        for k in ("allow", "deny", "allow_domains", "deny_domains", "profiles"):
            if getattr(self, k):
                out[k] = list(getattr(self, k))
        return out

    @classmethod
    def from_wire(cls, w: Mapping[str, Any] | None) -> "Network | None":
        if not w:
            return None
        return cls(
            egress=w.get("egress") or None,
            allow=_strs(w.get("allow")),
            deny=_strs(w.get("deny")),
            allow_domains=_strs(w.get("allow_domains")),
            deny_domains=_strs(w.get("deny_domains")),
            mode=w.get("mode") or None,
            profiles=_strs(w.get("profiles")),
        )


@dataclass
class Lifecycle:
    """What happens at a sandbox's timeout (docs/lifecycle.md)."""

    on_timeout: Literal["kill", "pause"] | None = None
    keep_memory: bool = False
    auto_resume: bool = False

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.on_timeout:
            out["on_timeout"] = self.on_timeout
        if self.keep_memory:
            out["keep_memory"] = True
        if self.auto_resume:
            out["auto_resume"] = True
        return out


@dataclass
class SandboxInfo:
    """A sandbox as the daemon describes it."""

    id: str
    image: str
    state: str
    name: str | None = None
    state_reason: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    cpu: float | None = None
    memory_mb: int | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    end_at: dt.datetime | None = None
    network: Network | None = None
    pause_mode: str | None = None
    node: str | None = None

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "SandboxInfo":
        return cls(
            id=str(w["id"]),
            image=str(w.get("image", "")),
            state=str(w.get("state", "")),
            name=w.get("name") or None,
            state_reason=w.get("state_reason") or None,
            labels=_map(w.get("labels")),
            env=_map(w.get("env")),
            cpu=w.get("cpu") or None,
            memory_mb=w.get("memory_mb") or None,
            created_at=parse_time(w.get("created_at")),
            updated_at=parse_time(w.get("updated_at")),
            end_at=parse_time(w.get("end_at")),
            network=Network.from_wire(w.get("network")),
            pause_mode=w.get("pause_mode") or None,
            node=w.get("node") or None,
        )


@dataclass
class SandboxPage:
    """One page of a listing; ``next_page_token`` is None on the last."""

    sandboxes: list[SandboxInfo]
    next_page_token: str | None


@dataclass
class ExecResult:
    """The outcome of a buffered exec: each stream keeps its first 16 MiB (``truncated`` says so)."""

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool = False

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "ExecResult":
        return cls(
            exit_code=int(w.get("exit_code", 0)),
            stdout=str(w.get("stdout", "")),
            stderr=str(w.get("stderr", "")),
            truncated=bool(w.get("truncated", False)),
        )


@dataclass
class ExecChunk:
    """Output of a streaming exec as it arrived: ``stream`` is ``stdout`` or ``stderr``."""

    stream: Literal["stdout", "stderr"]
    data: bytes

    @property
    def text(self) -> str:
        """The chunk decoded as UTF-8 (a character split across chunks is replaced)."""
        return self.data.decode("utf-8", "replace")


@dataclass
class ExecExit:
    """The end of a streaming exec: the command's exit code, -1 when a signal
    ended it (``status`` then names the signal: ``signal: killed``)."""

    exit_code: int
    status: str = ""


@dataclass
class ExposedPort:
    """An exposed port. ``reused`` says the exposure already existed: this call made nothing new."""

    port: int
    protocol: Literal["http", "tcp"]
    host_port: int
    public_url: str
    reused: bool
    created_at: dt.datetime | None = None

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "ExposedPort":
        return cls(
            port=int(w["port"]),
            protocol=w.get("protocol", "http"),
            host_port=int(w.get("host_port", 0)),
            public_url=str(w.get("public_url", "")),
            reused=bool(w.get("reused", False)),
            created_at=parse_time(w.get("created_at")),
        )


@dataclass
class CustomDomain:
    hostname: str
    sandbox_id: str
    port: int
    url: str
    created_at: dt.datetime | None = None

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "CustomDomain":
        return cls(
            hostname=str(w["hostname"]),
            sandbox_id=str(w.get("sandbox_id", "")),
            port=int(w.get("port", 0)),
            url=str(w.get("url", "")),
            created_at=parse_time(w.get("created_at")),
        )


_FILE_TYPES = {"FILE_TYPE_FILE": "file", "FILE_TYPE_DIRECTORY": "dir", "FILE_TYPE_SYMLINK": "symlink", 1: "file", 2: "dir", 3: "symlink"}


@dataclass
class FileEntry:
    """One entry of a directory listing (the agent's EntryInfo)."""

    name: str
    path: str
    type: Literal["file", "dir", "symlink", "unknown"]
    size: int
    mode: int
    permissions: str
    owner: str
    group: str
    modified_time: dt.datetime | None = None
    symlink_target: str | None = None

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "FileEntry":
        # Protobuf's JSON form: camelCase, int64 as a string, enums by name,
        # zero values left out.
        return cls(
            name=str(w.get("name", "")),
            path=str(w.get("path", "")),
            type=_FILE_TYPES.get(w.get("type", ""), "unknown"),  # type: ignore[arg-type]
            size=int(w.get("size", 0) or 0),
            mode=int(w.get("mode", 0) or 0),
            permissions=str(w.get("permissions", "")),
            owner=str(w.get("owner", "")),
            group=str(w.get("group", "")),
            modified_time=parse_time(w.get("modifiedTime")),
            symlink_target=w.get("symlinkTarget") or None,
        )


@dataclass
class Event:
    """One event of ``GET /v1/events``.

    A sandbox change has ``type`` one of created, started, stopped, paused,
    resumed, archived, expired, deleted, died, with ``sandbox_id``, ``state``
    (empty once the sandbox is gone) and ``old_state``; a template build's
    change (``template.building``, ``template.ready``, ``template.error``)
    names the template and the build instead. ``data`` is the whole payload.
    """

    type: str
    sandbox_id: str | None = None
    state: str | None = None
    old_state: str | None = None
    time: dt.datetime | None = None
    template_id: str | None = None
    template: str | None = None
    build_id: str | None = None
    error: str | None = None
    id: str | None = None
    data: Any = None

    @classmethod
    def from_sse(cls, name: str, event_id: str | None, raw: str) -> "Event":
        try:
            data: Any = json.loads(raw)
        except ValueError:
            data = raw
        obj: Mapping[str, Any] = data if isinstance(data, dict) else {}

        def s(k: str) -> str | None:
            v = obj.get(k)
            return v if isinstance(v, str) else None

        return cls(
            type=name or s("type") or "message",
            sandbox_id=s("sandbox_id") or None,
            state=s("state"),
            old_state=s("old_state"),
            time=parse_time(s("time")),
            template_id=s("template_id") or None,
            template=s("template") or None,
            build_id=s("build_id") or None,
            error=s("error") or None,
            id=event_id,
            data=data,
        )


@dataclass
class Token:
    """A personal access token. ``secret`` is set only in the answer of its creation."""

    name: str
    owner: str
    prefix: str
    scopes: list[str]
    created_at: dt.datetime | None = None
    last_used_at: dt.datetime | None = None
    expires_at: dt.datetime | None = None
    revoked_at: dt.datetime | None = None
    secret: str | None = None

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "Token":
        return cls(
            name=str(w.get("name", "")),
            owner=str(w.get("owner", "")),
            prefix=str(w.get("prefix", "")),
            scopes=_strs(w.get("scopes")),
            created_at=parse_time(w.get("created_at")),
            last_used_at=parse_time(w.get("last_used_at")),
            expires_at=parse_time(w.get("expires_at")),
            revoked_at=parse_time(w.get("revoked_at")),
            secret=w.get("token") or None,
        )


def b64decode(s: Any) -> bytes:
    return base64.b64decode(s) if isinstance(s, str) and s else b""
