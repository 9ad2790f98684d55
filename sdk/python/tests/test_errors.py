"""Typed errors from a real daemon's answers: 400, 401, 403 (see
test_sandpit's tokens test), 404, 409, 422 and 429, the last both from the
per-client limit on refused credentials and from a sandbox quota."""

from __future__ import annotations

import unittest
from typing import Callable

import harness
from sandpit import (
    AuthenticationError,
    ConflictError,
    ExecChunk,
    IdempotencyKeyMismatchError,
    InvalidRequestError,
    NameConflictError,
    NotFoundError,
    RateLimitedError,
    RetryPolicy,
    SandboxStoppedError,
    SandpitError,
    SandpitTimeoutError,
)

run: harness.Run
daemon: harness.Daemon
limited: harness.Daemon

NO_RETRY = RetryPolicy(max_attempts=1)


def setUpModule() -> None:
    global run, daemon, limited
    run = harness.Run("pyerr")
    try:
        run.setup()
        daemon = run.start_daemon("errors")
        # A refused credential empties this daemon's budget for the client
        # (0.2 per second, a burst of one), and it holds one sandbox at most.
        limited = run.start_daemon(
            "limited", ["--auth-failure-rate-limit", "0.2", "--auth-failure-delay", "0", "--max-sandboxes", "1"]
        )
    except BaseException:
        run.teardown()
        raise


def tearDownModule() -> None:
    run.teardown()


class Errors(unittest.TestCase):
    def test_404_on_a_missing_sandbox(self) -> None:
        sandpit = daemon.client()
        calls: list[Callable[[], object]] = [
            lambda: sandpit.get("sbmissing0000000000000"),
            lambda: sandpit.delete("sbmissing0000000000000"),
        ]
        for call in calls:
            with self.assertRaises(NotFoundError) as cm:
                call()
            e = cm.exception
            self.assertIsInstance(e, SandpitError)
            self.assertEqual((e.status, e.code), (404, "not_found"))
            self.assertIn("not found", e.message)

    def test_404_on_a_missing_file_and_a_deleted_sandbox(self) -> None:
        sandpit = daemon.client()
        sb = sandpit.create()
        with self.assertRaises(NotFoundError):
            sb.files.read("/no/such/file")
        sb.delete()
        calls: list[Callable[[], object]] = [lambda: sb.exec("true"), lambda: sb.exec_stream("true"), lambda: sb.files.list("/")]
        for call in calls:
            with self.assertRaises(NotFoundError):
                call()

    def test_409_on_a_duplicate_name(self) -> None:
        sandpit = daemon.client()
        name = harness.unique("dup")
        sb = sandpit.create(name=name)
        self.addCleanup(sb.delete)
        before = len(daemon.containers())
        with self.assertRaises(NameConflictError) as cm:
            sandpit.create(name=name)
        self.assertIsInstance(cm.exception, ConflictError)
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "name_conflict"))
        self.assertEqual(len(daemon.containers()), before, "the refused create made nothing")

    def test_400_and_422(self) -> None:
        sandpit = daemon.client()
        with self.assertRaises(InvalidRequestError) as cm:
            sandpit.list(page_size=5000).page()
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))

        key = harness.unique("key")
        sb = sandpit.create(labels={"a": "1"}, idempotency_key=key)
        self.addCleanup(sb.delete)
        with self.assertRaises(IdempotencyKeyMismatchError) as km:
            sandpit.create(labels={"a": "2"}, idempotency_key=key)
        self.assertIsInstance(km.exception, InvalidRequestError)
        self.assertEqual((km.exception.status, km.exception.code), (422, "idempotency_key_mismatch"))


    def test_exec_errors(self) -> None:
        sandpit = daemon.client()
        sb = sandpit.create()
        self.addCleanup(sb.delete)
        # A command past its timeout is killed, in either form of exec.
        with self.assertRaises(SandpitTimeoutError) as cm:
            sb.exec("sleep 600", timeout=1)
        self.assertEqual((cm.exception.status, cm.exception.code), (504, "timeout"))
        stream = sb.exec_stream("echo started; sleep 600", timeout=1)
        seen: list[object] = []
        with self.assertRaises(SandpitTimeoutError):
            for ev in stream:
                seen.append(ev)
        self.assertEqual(seen, [ExecChunk("stdout", b"started\n")])

        unrunnable: list[Callable[[], object]] = [
            lambda: sb.exec(["/no/such/program"]),
            lambda: sb.exec_stream(["/no/such/program"]).wait(),
        ]
        for call in unrunnable:
            with self.assertRaises(InvalidRequestError) as bad:
                call()
            self.assertEqual(bad.exception.status, 400)

        sb.stop()
        stopped: list[Callable[[], object]] = [lambda: sb.exec("true"), lambda: sb.exec_stream("true"), lambda: sb.files.list("/")]
        for call in stopped:
            with self.assertRaises(SandboxStoppedError) as nr:
                call()
            self.assertEqual((nr.exception.status, nr.exception.code), (409, "sandbox_stopped"))


class Limits(unittest.TestCase):
    def test_429_quota_then_401_then_rate_limited(self) -> None:
        sandpit = limited.client()
        sb = sandpit.create()
        # A reached quota is a 429 that no retry cures: raised at once.
        with self.assertRaises(RateLimitedError) as cm:
            sandpit.create()
        self.assertEqual((cm.exception.status, cm.exception.code), (429, "quota_exceeded"))
        self.assertEqual(len(limited.containers()), 1)

        with self.assertRaises(AuthenticationError) as auth:
            limited.client(token="not-the-token", retry=NO_RETRY).list().page()
        self.assertEqual((auth.exception.status, auth.exception.code), (401, "unauthorized"))

        # The refused credential spent the client's budget: even the right
        # token is refused until it refills, with a Retry-After.
        with self.assertRaises(RateLimitedError) as rl:
            limited.client(retry=NO_RETRY).get(sb.id)
        e = rl.exception
        self.assertEqual((e.status, e.code), (429, "rate_limited"))
        self.assertIsNotNone(e.retry_after)
        assert e.retry_after is not None
        self.assertGreaterEqual(e.retry_after, 1)

        # With retries the client waits as long as the daemon's Retry-After
        # asks, by which time the budget holds a request again: one retry
        # gets through (short backoffs of its own would have taken several).
        proxy = harness.LossyProxy(limited.api_port, lambda method, path: False)
        self.addCleanup(proxy.close)
        patient = limited.client(url=proxy.url, retry=RetryPolicy(max_attempts=10, base_delay=0.05, max_delay=10))
        self.assertEqual(patient.get(sb.id).id, sb.id)
        self.assertEqual([(m, p) for m, p, _ in proxy.seen], [("GET", f"/v1/sandboxes/{sb.id}")] * 2)
        patient.delete(sb.id)


if __name__ == "__main__":
    unittest.main()
