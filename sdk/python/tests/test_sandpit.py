"""The Python SDK against a real daemon and the real Docker engine: the
sandbox lifecycle, buffered and streaming exec, files, ports and custom
domains, the event stream, tokens, and retry safety through a proxy that
loses answers."""

from __future__ import annotations

import queue
import threading
import unittest

import harness
from sandpit import (
    ConflictError,
    Event,
    ExecChunk,
    ExecExit,
    HostnameConflictError,
    Network,
    NotFoundError,
    PermissionDeniedError,
    RetryPolicy,
    Sandbox,
    Sandpit,
)

run: harness.Run
daemon: harness.Daemon
sandpit: Sandpit


def setUpModule() -> None:
    global run, daemon, sandpit
    run = harness.Run("py")
    try:
        run.setup()
        daemon = run.start_daemon("sdk")
    except BaseException:
        run.teardown()
        raise
    sandpit = daemon.client()


def tearDownModule() -> None:
    run.teardown()


class SandboxLifecycle(unittest.TestCase):
    def test_create_get_list_delete(self) -> None:
        job = harness.unique("job")
        name = harness.unique("box")
        sb = sandpit.create(name=name, labels={"job": job}, env={"GREETING": "hi"}, cpu=0.5, memory_mb=256, timeout=600)
        self.assertEqual(sb.state, "running")
        self.assertEqual(sb.name, name)
        self.assertEqual(sb.labels, {"job": job})
        self.assertEqual(sb.info.memory_mb, 256)
        self.assertIsNotNone(sb.info.end_at)
        self.assertEqual(sb.exec("echo $GREETING").stdout, "hi\n")

        self.assertEqual(sandpit.get(sb.id).id, sb.id)

        other = sandpit.create(labels={"job": job})
        # One per page: the listing follows next_page_token to the end.
        pages = list(sandpit.list(labels={"job": job}, page_size=1).pages())
        self.assertEqual([len(p) for p in pages], [1, 1])
        self.assertEqual(sorted(s.id for s in sandpit.list(labels={"job": job})), sorted([sb.id, other.id]))
        self.assertEqual([s.id for s in sandpit.list(labels={"job": job}, states=["running"])].count(sb.id), 1)

        sb.delete()
        sandpit.delete(other.id)
        with self.assertRaises(NotFoundError) as cm:
            sandpit.get(sb.id)
        self.assertEqual(cm.exception.status, 404)
        self.assertEqual(list(sandpit.list(labels={"job": job})), [])

    def test_stop_start_pause_resume(self) -> None:
        sb = sandpit.create()
        self.addCleanup(sb.delete)
        self.assertEqual(sb.stop().state, "stopped")
        self.assertEqual(sb.start().state, "running")
        self.assertEqual(sb.pause().state, "paused")
        self.assertEqual(sb.resume().state, "running")
        self.assertEqual(sb.refresh().state, "running")
        self.assertEqual(sb.exec("echo alive").stdout, "alive\n")

    def test_create_with_network_policy(self) -> None:
        sb = sandpit.create(network=Network(egress="none"))
        self.addCleanup(sb.delete)
        self.assertIsNotNone(sb.info.network)
        assert sb.info.network is not None
        self.assertEqual(sb.info.network.egress, "none")


class Exec(unittest.TestCase):
    sb: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        cls.sb = sandpit.create(labels={"test": "exec"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.delete()

    def test_buffered(self) -> None:
        res = self.sb.exec("echo out; echo err >&2; exit 3")
        self.assertEqual((res.exit_code, res.stdout, res.stderr), (3, "out\n", "err\n"))
        res = self.sb.exec(["sh", "-c", 'pwd; echo "$A"'], env={"A": "b c"}, cwd="/tmp")
        self.assertEqual(res.stdout, "/tmp\nb c\n")

    def test_stream_delivers_output_while_the_command_runs(self) -> None:
        # The command cannot end until the client has seen its first line
        # (the client's answer is a file the command waits for), so output
        # held back until the end would never arrive and the exec would time
        # out instead.
        flag = f"/tmp/{harness.unique('seen')}"
        events: list[ExecChunk | ExecExit] = []
        with self.sb.exec_stream(f"echo ready; while [ ! -e {flag} ]; do sleep 0.1; done; echo done", timeout=60) as stream:
            self.assertIsNotNone(stream.pid)
            for ev in stream:
                events.append(ev)
                if isinstance(ev, ExecChunk) and ev.text == "ready\n":
                    # The command is still looping: nothing after "ready" came yet.
                    self.assertEqual(len(events), 1)
                    self.sb.files.write(flag, "")
        self.assertEqual(events[0], ExecChunk("stdout", b"ready\n"))
        last = events[-1]
        self.assertIsInstance(last, ExecExit)
        assert isinstance(last, ExecExit)
        self.assertEqual(last.exit_code, 0)
        out = b"".join(e.data for e in events if isinstance(e, ExecChunk) and e.stream == "stdout")
        self.assertEqual(out, b"ready\ndone\n")
        self.assertEqual(stream.exit_code, 0)

    def test_stream_separates_stdout_and_stderr(self) -> None:
        stream = self.sb.exec_stream("echo one; echo two >&2; echo three; exit 7")
        events = list(stream)
        # Each stream keeps its own order; how the two interleave is the
        # agent's reading of two pipes, which no test should depend on.
        by_stream = {name: b"".join(e.data for e in events if isinstance(e, ExecChunk) and e.stream == name) for name in ("stdout", "stderr")}
        self.assertEqual(by_stream, {"stdout": b"one\nthree\n", "stderr": b"two\n"})
        self.assertIsInstance(events[-1], ExecExit)
        self.assertEqual(stream.exit_code, 7)

    def test_stream_stdin(self) -> None:
        stream = self.sb.exec_stream(["cat"], stdin=True)
        stream.send_stdin("hello ")
        stream.send_stdin(b"world\n")
        stream.close_stdin()
        res = stream.wait()
        self.assertEqual((res.exit_code, res.stdout), (0, "hello world\n"))

    def test_stream_kill(self) -> None:
        stream = self.sb.exec_stream("echo started; sleep 600")
        it = iter(stream)
        self.assertEqual(next(it), ExecChunk("stdout", b"started\n"))
        stream.kill()
        rest = list(it)
        self.assertEqual(rest[-1], ExecExit(-1, "signal: killed"))
        self.assertEqual(stream.exit_code, -1)


class Files(unittest.TestCase):
    def test_write_read_list_stat_remove(self) -> None:
        sb = sandpit.create()
        self.addCleanup(sb.delete)
        sb.files.write("/data/sub/hello.txt", "hello\n")
        blob = bytes(range(256)) * 64
        sb.files.write("/data/blob.bin", blob)
        self.assertEqual(sb.files.read_text("/data/sub/hello.txt"), "hello\n")
        self.assertEqual(sb.files.read("/data/blob.bin"), blob)
        self.assertEqual(sb.exec("cat /data/sub/hello.txt").stdout, "hello\n")

        entries = {e.name: e for e in sb.files.list("/data")}
        self.assertEqual(sorted(entries), ["blob.bin", "sub"])
        self.assertEqual(entries["blob.bin"].type, "file")
        self.assertEqual(entries["blob.bin"].size, len(blob))
        self.assertEqual(entries["blob.bin"].path, "/data/blob.bin")
        self.assertEqual(entries["sub"].type, "dir")
        deep = sorted(e.path for e in sb.files.list("/data", depth=2))
        self.assertIn("/data/sub/hello.txt", deep)
        self.assertEqual(sb.files.stat("/data/sub/hello.txt").size, 6)

        sb.files.remove("/data/sub")
        with self.assertRaises(NotFoundError):
            sb.files.read("/data/sub/hello.txt")
        with self.assertRaises(NotFoundError):
            sb.files.stat("/data/sub")
        sb.files.make_dir("/data/new/dir")
        self.assertEqual(sb.files.stat("/data/new/dir").type, "dir")


class Ports(unittest.TestCase):
    def test_expose_fetch_list_unexpose(self) -> None:
        sb = sandpit.create()
        self.addCleanup(sb.delete)
        sb.files.write("/www/index.html", "hello from the sandbox\n")
        # busybox httpd puts itself in the background; the exec returns at once.
        started = sb.exec("httpd -p 8080 -h /www")
        self.assertEqual(started.exit_code, 0, started.stderr)

        first = sb.expose_port(8080)
        again = sb.expose_port(8080)
        self.assertEqual(first.protocol, "http")
        self.assertEqual((first.reused, again.reused), (False, True))
        self.assertEqual(first.public_url, again.public_url)
        self.assertIn(f":{daemon.proxy_port}", first.public_url)

        def fetch() -> bytes:
            status, body = harness.get(first.public_url)
            self.assertEqual(status, 200)
            return body

        self.assertEqual(harness.eventually(fetch), b"hello from the sandbox\n")
        self.assertEqual([p.port for p in sb.ports()], [8080])
        sb.unexpose_port(8080)
        self.assertEqual(sb.ports(), [])

    def test_custom_domains(self) -> None:
        sb = sandpit.create()
        self.addCleanup(sb.delete)
        host = f"{harness.unique('app')}.example.test"
        sb.expose_port(8080)
        d = sb.add_custom_domain(host, 8080)
        self.assertEqual((d.hostname, d.sandbox_id, d.port), (host, sb.id, 8080))
        self.assertIn(host, d.url)
        self.assertEqual(sb.add_custom_domain(host, 8080).hostname, host, "binding it again is a no-op")
        self.assertEqual([x.hostname for x in sb.custom_domains()], [host])

        other = sandpit.create()
        self.addCleanup(other.delete)
        other.expose_port(8080)
        with self.assertRaises(HostnameConflictError) as cm:
            other.add_custom_domain(host, 8080)
        self.assertIsInstance(cm.exception, ConflictError)
        self.assertEqual(cm.exception.status, 409)

        sb.remove_custom_domain(host)
        self.assertEqual(sb.custom_domains(), [])


class Events(unittest.TestCase):
    def test_stream_shows_the_create_and_delete(self) -> None:
        stream = sandpit.events()
        # A watchdog: a stream that never delivers ends the test, not the suite.
        watchdog = threading.Timer(60, stream.close)
        watchdog.start()
        self.addCleanup(watchdog.cancel)
        self.addCleanup(stream.close)
        sb = sandpit.create()
        seen: list[str] = []
        for ev in stream:
            if ev.sandbox_id != sb.id:
                continue
            seen.append(ev.type)
            if ev.type == "created":
                self.assertEqual(ev.state, "running")
                self.assertIsNotNone(ev.time)
                sb.delete()
            if ev.type == "deleted":
                self.assertEqual(ev.state, "")
                break
        self.assertEqual(seen[0], "created")
        self.assertEqual(seen[-1], "deleted")


    def test_stream_reconnects_after_a_daemon_restart(self) -> None:
        # Patient enough to wait out the restart.
        patient = daemon.client(retry=RetryPolicy(max_attempts=100, base_delay=0.05, max_delay=0.5))
        stream = patient.events()
        watchdog = threading.Timer(120, stream.close)
        watchdog.start()
        self.addCleanup(watchdog.cancel)
        self.addCleanup(stream.close)
        got: queue.Queue[Event | None] = queue.Queue()

        def consume() -> None:
            try:
                for ev in stream:
                    got.put(ev)
            finally:
                got.put(None)

        threading.Thread(target=consume, daemon=True).start()
        daemon.restart()

        def reconnected() -> None:
            self.assertGreaterEqual(stream.connections, 2)

        harness.eventually(reconnected, attempts=600)
        # The new stream is subscribed: an event of this create reaches it.
        sb = sandpit.create()
        self.addCleanup(sb.delete)
        while True:
            ev = got.get(timeout=120)
            self.assertIsNotNone(ev, "the stream ended")
            assert ev is not None
            if ev.sandbox_id == sb.id and ev.type == "created":
                break


class RetrySafety(unittest.TestCase):
    def test_a_create_whose_answer_is_lost_makes_one_sandbox(self) -> None:
        proxy = harness.LossyProxy(daemon.api_port, lambda method, path: method == "POST" and path == "/v1/sandboxes")
        self.addCleanup(proxy.close)
        job = harness.unique("retried")
        before = len(daemon.containers())
        sb = daemon.client(url=proxy.url).create(labels={"job": job})
        self.addCleanup(sb.delete)
        self.assertTrue(proxy.dropped, "the first answer was lost")
        posts = [s for s in proxy.seen if s[0] == "POST" and s[1] == "/v1/sandboxes"]
        self.assertEqual(len(posts), 2, proxy.seen)
        self.assertIsNotNone(posts[0][2])
        self.assertEqual(posts[0][2], posts[1][2], "both attempts carry one Idempotency-Key")
        self.assertEqual([s.id for s in sandpit.list(labels={"job": job})], [sb.id])
        self.assertEqual(len(daemon.containers()), before + 1)

    def test_an_exposure_whose_answer_is_lost_is_made_once(self) -> None:
        sb = sandpit.create()
        self.addCleanup(sb.delete)
        proxy = harness.LossyProxy(daemon.api_port, lambda method, path: method == "POST" and path.endswith("/ports"))
        self.addCleanup(proxy.close)
        port = daemon.client(url=proxy.url).get(sb.id).expose_port(9000)
        self.assertTrue(proxy.dropped)
        keys = {s[2] for s in proxy.seen if s[0] == "POST"}
        self.assertEqual(len(keys), 1, proxy.seen)
        self.assertEqual([p.port for p in sb.ports()], [9000])
        self.assertEqual(port.public_url, sb.ports()[0].public_url)

    def test_an_explicit_key_makes_a_call_safe_to_repeat(self) -> None:
        key = harness.unique("key")
        a = sandpit.create(labels={"k": key}, idempotency_key=key)
        self.addCleanup(a.delete)
        b = sandpit.create(labels={"k": key}, idempotency_key=key)
        self.assertEqual(a.id, b.id)
        self.assertEqual(len(list(sandpit.list(labels={"k": key}))), 1)

    def test_no_retry_policy_surfaces_the_lost_answer(self) -> None:
        proxy = harness.LossyProxy(daemon.api_port, lambda method, path: method == "GET")
        self.addCleanup(proxy.close)
        from sandpit import NetworkError

        with self.assertRaises(NetworkError):
            daemon.client(url=proxy.url, retry=RetryPolicy(max_attempts=1)).list().page()


class Tokens(unittest.TestCase):
    def test_create_list_use_revoke(self) -> None:
        name = harness.unique("reader")
        tok = sandpit.tokens.create(name, scopes=["sandboxes:read"])
        self.assertTrue(tok.secret)
        self.assertEqual(tok.scopes, ["sandboxes:read"])
        self.assertIn(name, [t.name for t in sandpit.tokens.list()])

        reader = daemon.client(token=tok.secret)
        reader.list().page()
        with self.assertRaises(PermissionDeniedError) as cm:
            reader.create()
        self.assertEqual((cm.exception.status, cm.exception.code), (403, "forbidden"))

        with self.assertRaises(ConflictError):
            sandpit.tokens.create(name)
        revoked = sandpit.tokens.revoke(name)
        self.assertIsNotNone(revoked.revoked_at)
        self.assertNotIn(name, [t.name for t in sandpit.tokens.list()])
        self.assertIn(name, [t.name for t in sandpit.tokens.list(include_revoked=True)])


if __name__ == "__main__":
    unittest.main()
