"""The asyncio client: the synchronous client's calls run in worker threads
(``asyncio.to_thread``), and streams hand over each piece as it arrives, so
a streaming exec or the event stream stays streaming."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Iterator, Literal, Mapping, Sequence, TypeVar, cast

from ._http import RetryPolicy
from .client import ExecStream, Files, Sandbox, SandboxList, Sandpit, Tokens
from .events import EventStream
from .types import CustomDomain, Event, ExecChunk, ExecExit, ExecResult, ExposedPort, FileEntry, Lifecycle, Network, SandboxInfo, Token

__all__ = ["AsyncSandpit", "AsyncSandbox", "AsyncFiles", "AsyncTokens", "AsyncExecStream", "AsyncEventStream"]

T = TypeVar("T")
_DONE = object()


async def _run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


async def _next(it: Iterator[T]) -> T:
    """The iterator's next item, read in a worker thread; StopAsyncIteration at its end."""
    item: T | object = await asyncio.to_thread(lambda: next(it, _DONE))
    if item is _DONE:
        raise StopAsyncIteration
    return cast(T, item)


class AsyncSandpit:
    """The asyncio twin of Sandpit; the same arguments and retry safety."""

    def __init__(
        self,
        api_url: str | None = None,
        token: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float = 120.0,
    ) -> None:
        self._sync = Sandpit(api_url, token, retry=retry, timeout=timeout)
        self.tokens = AsyncTokens(self._sync.tokens)

    @property
    def api_url(self) -> str:
        return self._sync.api_url

    async def create(
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
    ) -> "AsyncSandbox":
        sb = await _run(
            self._sync.create, image=image, template=template, name=name, env=env, labels=labels, cpu=cpu,
            memory_mb=memory_mb, timeout=timeout, network=network, lifecycle=lifecycle, idempotency_key=idempotency_key,
        )
        return AsyncSandbox(sb)

    async def get(self, sandbox: str) -> "AsyncSandbox":
        return AsyncSandbox(await _run(self._sync.get, sandbox))

    def list(
        self, *, labels: Mapping[str, str] | None = None, states: Sequence[str] | None = None, page_size: int | None = None
    ) -> "AsyncSandboxList":
        return AsyncSandboxList(self._sync.list(labels=labels, states=states, page_size=page_size))

    async def delete(self, sandbox: str, *, idempotency_key: str | None = None) -> None:
        await _run(self._sync.delete, sandbox, idempotency_key=idempotency_key)

    async def events(self) -> "AsyncEventStream":
        """Opens the event stream; it is connected when this returns."""
        return AsyncEventStream(await _run(self._sync.events))


class AsyncSandboxList:
    def __init__(self, sync: SandboxList) -> None:
        self._sync = sync

    async def pages(self) -> AsyncIterator[list["AsyncSandbox"]]:
        token: str | None = None
        while True:
            p = await _run(self._sync.page, token)
            yield [AsyncSandbox(Sandbox(self._sync._t, info)) for info in p.sandboxes]
            token = p.next_page_token
            if not token:
                return

    async def __aiter__(self) -> AsyncIterator["AsyncSandbox"]:
        async for page in self.pages():
            for sb in page:
                yield sb


class AsyncSandbox:
    """The asyncio twin of Sandbox."""

    def __init__(self, sync: Sandbox) -> None:
        self.sync = sync
        self.files = AsyncFiles(sync.files)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, name={self.name!r}, state={self.state!r})"

    @property
    def info(self) -> SandboxInfo:
        return self.sync.info

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def name(self) -> str | None:
        return self.sync.name

    @property
    def state(self) -> str:
        return self.sync.state

    @property
    def labels(self) -> dict[str, str]:
        return self.sync.labels

    async def refresh(self) -> "AsyncSandbox":
        await _run(self.sync.refresh)
        return self

    async def delete(self, *, idempotency_key: str | None = None) -> None:
        await _run(self.sync.delete, idempotency_key=idempotency_key)

    async def start(self, *, idempotency_key: str | None = None) -> "AsyncSandbox":
        await _run(self.sync.start, idempotency_key=idempotency_key)
        return self

    async def stop(self, *, idempotency_key: str | None = None) -> "AsyncSandbox":
        await _run(self.sync.stop, idempotency_key=idempotency_key)
        return self

    async def pause(self, *, mode: Literal["memory", "filesystem"] | None = None, idempotency_key: str | None = None) -> "AsyncSandbox":
        await _run(self.sync.pause, mode=mode, idempotency_key=idempotency_key)
        return self

    async def resume(self, *, idempotency_key: str | None = None) -> "AsyncSandbox":
        await _run(self.sync.resume, idempotency_key=idempotency_key)
        return self

    async def update_network(self, network: Network) -> "AsyncSandbox":
        await _run(self.sync.update_network, network)
        return self

    async def exec(
        self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None, timeout: float | None = None
    ) -> ExecResult:
        return await _run(self.sync.exec, cmd, env=env, cwd=cwd, timeout=timeout)

    async def exec_stream(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bool = False,
    ) -> "AsyncExecStream":
        """Starts a command; ``async for ev in stream`` yields its output as it comes, then ExecExit."""
        return AsyncExecStream(await _run(self.sync.exec_stream, cmd, env=env, cwd=cwd, timeout=timeout, stdin=stdin))

    async def expose_port(
        self, port: int, *, protocol: Literal["http", "tcp"] | None = None, idempotency_key: str | None = None
    ) -> ExposedPort:
        return await _run(self.sync.expose_port, port, protocol=protocol, idempotency_key=idempotency_key)

    async def ports(self) -> list[ExposedPort]:
        return await _run(self.sync.ports)

    async def unexpose_port(self, port: int, *, idempotency_key: str | None = None) -> None:
        await _run(self.sync.unexpose_port, port, idempotency_key=idempotency_key)

    async def add_custom_domain(self, hostname: str, port: int, *, idempotency_key: str | None = None) -> CustomDomain:
        return await _run(self.sync.add_custom_domain, hostname, port, idempotency_key=idempotency_key)

    async def custom_domains(self) -> list[CustomDomain]:
        return await _run(self.sync.custom_domains)

    async def remove_custom_domain(self, hostname: str, *, idempotency_key: str | None = None) -> None:
        await _run(self.sync.remove_custom_domain, hostname, idempotency_key=idempotency_key)


class AsyncExecStream:
    """The asyncio twin of ExecStream."""

    def __init__(self, sync: ExecStream) -> None:
        self.sync = sync
        self._it = iter(sync)

    @property
    def pid(self) -> int | None:
        return self.sync.pid

    @property
    def exit_code(self) -> int | None:
        return self.sync.exit_code

    def __aiter__(self) -> "AsyncExecStream":
        return self

    async def __anext__(self) -> ExecChunk | ExecExit:
        return await _next(self._it)

    async def wait(self) -> ExecResult:
        return await _run(self.sync.wait)

    async def send_stdin(self, data: bytes | str) -> None:
        await _run(self.sync.send_stdin, data)

    async def close_stdin(self) -> None:
        await _run(self.sync.close_stdin)

    async def kill(self) -> None:
        await _run(self.sync.kill)

    async def aclose(self) -> None:
        # Closing the socket wakes the worker thread blocked in a read.
        self.sync.close()

    async def __aenter__(self) -> "AsyncExecStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncEventStream:
    """The asyncio twin of EventStream."""

    def __init__(self, sync: EventStream) -> None:
        self.sync = sync

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> Event:
        return await _next(self.sync)

    async def aclose(self) -> None:
        self.sync.close()

    async def __aenter__(self) -> "AsyncEventStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncFiles:
    def __init__(self, sync: Files) -> None:
        self.sync = sync

    async def read(self, path: str) -> bytes:
        return await _run(self.sync.read, path)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return await _run(self.sync.read_text, path, encoding)

    async def write(self, path: str, data: bytes | str) -> None:
        await _run(self.sync.write, path, data)

    async def list(self, path: str, *, depth: int = 1) -> list[FileEntry]:
        return await _run(self.sync.list, path, depth=depth)

    async def stat(self, path: str) -> FileEntry:
        return await _run(self.sync.stat, path)

    async def make_dir(self, path: str) -> None:
        await _run(self.sync.make_dir, path)

    async def remove(self, path: str) -> None:
        await _run(self.sync.remove, path)


class AsyncTokens:
    def __init__(self, sync: Tokens) -> None:
        self.sync = sync

    async def create(
        self, name: str, *, owner: str | None = None, scopes: Sequence[str] | None = None, expires_in: float | None = None
    ) -> Token:
        return await _run(self.sync.create, name, owner=owner, scopes=scopes, expires_in=expires_in)

    async def list(self, *, include_revoked: bool = False) -> list[Token]:
        return await _run(self.sync.list, include_revoked=include_revoked)

    async def revoke(self, name: str) -> Token:
        return await _run(self.sync.revoke, name)
