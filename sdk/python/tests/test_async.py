"""The asyncio client against a real daemon: create, streaming exec (output
arrives while the command runs), files, events and delete."""

from __future__ import annotations

import asyncio
import unittest

import harness
from sandpit import ExecChunk, ExecExit, NotFoundError

run: harness.Run
daemon: harness.Daemon


def setUpModule() -> None:
    global run, daemon
    run = harness.Run("pyaio")
    try:
        run.setup()
        daemon = run.start_daemon("aio")
    except BaseException:
        run.teardown()
        raise


def tearDownModule() -> None:
    run.teardown()


class Async(unittest.IsolatedAsyncioTestCase):
    async def test_create_exec_stream_delete(self) -> None:
        sandpit = daemon.async_client()
        job = harness.unique("aio")
        events = await sandpit.events()
        try:
            sb = await sandpit.create(labels={"job": job})
            self.assertEqual(sb.state, "running")
            self.assertEqual([s.id async for s in sandpit.list(labels={"job": job})], [sb.id])

            res = await sb.exec("echo buffered")
            self.assertEqual((res.exit_code, res.stdout), (0, "buffered\n"))

            # The command waits for a file the client writes on seeing its
            # first line: only a stream that delivers while it runs ends.
            flag = f"/tmp/{harness.unique('seen')}"
            seen: list[ExecChunk | ExecExit] = []
            async with await sb.exec_stream(f"echo ready; while [ ! -e {flag} ]; do sleep 0.1; done; echo done", timeout=60) as stream:
                async for ev in stream:
                    seen.append(ev)
                    if ev == ExecChunk("stdout", b"ready\n"):
                        self.assertEqual(len(seen), 1)
                        await sb.files.write(flag, "")
            self.assertEqual(seen[0], ExecChunk("stdout", b"ready\n"))
            self.assertIsInstance(seen[-1], ExecExit)
            self.assertEqual(stream.exit_code, 0)
            self.assertEqual(b"".join(e.data for e in seen if isinstance(e, ExecChunk)), b"ready\ndone\n")

            # Several streams run side by side on one event loop.
            results = await asyncio.gather(*[(await sb.exec_stream(f"sleep 0.2; echo {i}")).wait() for i in range(3)])
            self.assertEqual([r.stdout for r in results], ["0\n", "1\n", "2\n"])

            await sb.files.write("/tmp/a.txt", "async\n")
            self.assertEqual(await sb.files.read_text("/tmp/a.txt"), "async\n")
            self.assertIn("a.txt", [e.name for e in await sb.files.list("/tmp")])

            await sb.delete()
            with self.assertRaises(NotFoundError):
                await sandpit.get(sb.id)

            types = []
            async def collect() -> None:
                async for ev in events:
                    if ev.sandbox_id == sb.id:
                        types.append(ev.type)
                        if ev.type == "deleted":
                            return
            await asyncio.wait_for(collect(), 60)
            self.assertEqual(types[0], "created")
            self.assertEqual(types[-1], "deleted")
        finally:
            await events.aclose()


if __name__ == "__main__":
    unittest.main()
