"""Test support: build the sandpit binary, run real daemons against the
local Docker engine, and clean up everything they made.

Every container a test daemon creates carries the label
sandpit.run=<this run's id>, so the cleanup removes exactly this run's
containers, images and networks on an engine that may hold others. A fake
is used only to inject a fault the real thing cannot produce: the TCP proxy
that loses an answer.
"""

from __future__ import annotations

import atexit
import functools
import http.client
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Callable

from sandpit import RetryPolicy, Sandpit
from sandpit.aio import AsyncSandpit

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TEST_IMAGE = os.environ.get("SANDPIT_TEST_IMAGE", "sandpit/base:test")
NETWORK_POOL = "10.200.0.0/14"
# Short backoff keeps the retried tests quick.
FAST_RETRY = RetryPolicy(max_attempts=5, base_delay=0.02, max_delay=0.2)


@functools.lru_cache(maxsize=None)
def daemon_binary() -> str:
    """SANDPIT_BIN, or the daemon built once per test process by scripts/build.sh
    (which embeds the small agent, as an installed daemon has)."""
    if os.environ.get("SANDPIT_BIN"):
        return os.path.abspath(os.environ["SANDPIT_BIN"])
    out = tempfile.mkdtemp(prefix="sandpit-py-bin-")
    atexit.register(shutil.rmtree, out, True)
    binary = os.path.join(out, "sandpit")
    subprocess.run(
        ["bash", "scripts/build.sh", "-o", binary], cwd=REPO_ROOT, check=True,
        env={**os.environ, "CGO_ENABLED": "0"}, capture_output=True,
    )
    return binary


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*args: str) -> str:
    return subprocess.run(list(args), check=True, capture_output=True, text=True).stdout


@dataclass
class Daemon:
    """One running `sandpit serve`, its ports, token and log."""

    run: "Run"
    name: str
    data_dir: str
    token: str
    api_port: int
    proxy_port: int
    network: str
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    log_path: str = ""
    _log: object = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def client(self, url: str | None = None, token: str | None = None, retry: RetryPolicy = FAST_RETRY) -> Sandpit:
        return Sandpit(url or self.url, token or self.token, retry=retry)

    def async_client(self, url: str | None = None, token: str | None = None) -> AsyncSandpit:
        return AsyncSandpit(url or self.url, token or self.token, retry=FAST_RETRY)

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def launch(self) -> None:
        argv = [
            self.run.binary, "serve",
            "--data-dir", self.data_dir,
            "--listen", f"127.0.0.1:{self.api_port}",
            "--proxy-listen", f"127.0.0.1:{self.proxy_port}",
            "--token", self.token,
            "--default-image", TEST_IMAGE,
            "--container-label", f"sandpit.run={self.run.id}",
            "--container-label", f"sandpit.test-daemon={self.name}",
            "--network-name", self.network,
            "--network-pool", NETWORK_POOL,
            *self.args,
        ]
        self.log_path = os.path.join(self.data_dir, "daemon.log")
        log = open(self.log_path, "ab")
        self._log = log
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    c.close()
                    return
                c.close()
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon {self.name} exited early ({self.proc.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"daemon {self.name} did not start:\n{self.log()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stops the daemon by its pid: SIGTERM, then SIGKILL after 15 s."""
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
            self._log = None

    def restart(self) -> None:
        """Stops the daemon and starts it again on the same ports and data."""
        self.stop()
        self.launch()

    def containers(self) -> list[str]:
        """This daemon's containers, running or not."""
        return self.run.containers(self.name)


class Run:
    """One test module's daemons, all labelled with one run id."""

    def __init__(self, prefix: str = "py") -> None:
        self.id = f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}"
        self.work_dir = tempfile.mkdtemp(prefix="sandpit-py-")
        self.binary = ""
        self.daemons: list[Daemon] = []
        self.networks: list[str] = []

    def setup(self) -> None:
        """Builds the daemon (unless SANDPIT_BIN names one) and makes sure the test image exists."""
        self.binary = daemon_binary()
        if subprocess.run(["docker", "image", "inspect", TEST_IMAGE], capture_output=True).returncode != 0:
            subprocess.run(
                [os.path.join(REPO_ROOT, "scripts", "build-test-image.sh")], check=True,
                env={**os.environ, "SANDPIT_TEST_IMAGE": TEST_IMAGE}, capture_output=True,
            )

    def start_daemon(self, name: str, args: list[str] | None = None) -> Daemon:
        data_dir = tempfile.mkdtemp(prefix=f"{name}-", dir=self.work_dir)
        network = f"sandpit-{self.id}-{name}"
        self.networks.append(network)
        d = Daemon(self, name, data_dir, f"tok-{name}-{secrets.token_hex(8)}", free_port(), free_port(), network, list(args or []))
        # free_port releases the port before the daemon binds it, so a suite
        # running beside this one may take it in between: try fresh ports.
        for attempt in range(1, 6):
            try:
                d.launch()
                break
            except RuntimeError as e:
                d.stop()
                if attempt == 5 or "address already in use" not in str(e):
                    raise
                d.api_port, d.proxy_port = free_port(), free_port()
        self.daemons.append(d)
        return d

    def containers(self, daemon: str | None = None) -> list[str]:
        args = ["docker", "ps", "-aq", "--filter", f"label=sandpit.run={self.id}"]
        if daemon:
            args += ["--filter", f"label=sandpit.test-daemon={daemon}"]
        return [line for line in _run(*args).split() if line]

    def teardown(self) -> None:
        """Stops every daemon and removes this run's containers, images, networks and files."""
        for d in self.daemons:
            d.stop()
        ids = self.containers()
        if ids:
            subprocess.run(["docker", "rm", "-f", "-v", *ids], capture_output=True)
        imgs = _run("docker", "images", "-q", "--no-trunc", "--filter", f"label=sandpit.run={self.id}").split()
        if imgs:
            subprocess.run(["docker", "rmi", "-f", *sorted(set(imgs))], capture_output=True)
        for n in self.networks:
            subprocess.run([self.binary, "uninstall", "--network-name", n], capture_output=True)
        shutil.rmtree(self.work_dir, ignore_errors=True)


class LossyProxy:
    """Forwards TCP connections to a daemon and records the request line and
    Idempotency-Key of every request it sees. The first request for which
    drop(method, path) is true is forwarded, but its answer is thrown away
    and the connection closed: the daemon did the work, the client never
    learns it."""

    def __init__(self, upstream_port: int, drop: Callable[[str, str], bool]) -> None:
        self._upstream = upstream_port
        self._drop = drop
        self._lock = threading.Lock()
        self.armed = True
        self.seen: list[tuple[str, str, str | None]] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def dropped(self) -> bool:
        return not self.armed

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._server.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self._upstream))
            with self._lock:
                self._socks += [down, up]
            doomed = threading.Event()
            threading.Thread(target=self._pump_up, args=(down, up, doomed), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(down, up, doomed), daemon=True).start()

    def _pump_up(self, down: socket.socket, up: socket.socket, doomed: threading.Event) -> None:
        while True:
            try:
                buf = down.recv(65536)
            except OSError:
                break
            if not buf:
                break
            head = buf.decode("latin-1")
            first, _, rest = head.partition("\r\n")
            parts = first.split(" ")
            if len(parts) == 3 and parts[2].startswith("HTTP/1."):
                key = None
                for line in rest.split("\r\n"):
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "idempotency-key":
                        key = v.strip()
                path = urllib.parse.urlsplit(parts[1]).path
                with self._lock:
                    self.seen.append((parts[0], path, key))
                    if self.armed and self._drop(parts[0], path):
                        self.armed = False
                        doomed.set()
            try:
                up.sendall(buf)
            except OSError:
                break
        _close(down, up)

    def _pump_down(self, down: socket.socket, up: socket.socket, doomed: threading.Event) -> None:
        while True:
            try:
                buf = up.recv(65536)
            except OSError:
                break
            if not buf or doomed.is_set():
                break
            try:
                down.sendall(buf)
            except OSError:
                break
        _close(down, up)

    def close(self) -> None:
        self._server.close()
        with self._lock:
            for s in self._socks:
                _close(s)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    """GETs a URL, sending the request to 127.0.0.1 whatever the host name:
    preview URLs name <id>-<port>.localhost, which the resolver of a CI
    machine need not know."""
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection("127.0.0.1", u.port or 80, timeout=timeout)
    try:
        c.request("GET", (u.path or "/") + (f"?{u.query}" if u.query else ""), headers={"Host": u.netloc})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def eventually(fn: Callable[[], object], attempts: int = 100, delay: float = 0.1) -> object:
    """Calls fn until it stops raising or the attempts run out."""
    for i in range(1, attempts + 1):
        try:
            return fn()
        except Exception:
            if i >= attempts:
                raise
            time.sleep(delay)
    return None
