"""The README's quickstart, run as written (its Python block, unchanged) as
a program of its own against a real daemon whose default image is the
realistic base image (it runs python3 -m http.server)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import unittest

import harness

BASE_IMAGE = os.environ.get("SANDPIT_BASE_IMAGE", "sandpit/base:latest")
README = os.path.join(os.path.dirname(__file__), "..", "README.md")


def quickstart() -> str:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"## Quickstart.*?```python\n(.*?)```", text, re.S)
    if m is None:
        raise AssertionError("README.md has no Python block under ## Quickstart")
    return m.group(1)


class Readme(unittest.TestCase):
    def test_quickstart_runs_as_written(self) -> None:
        if subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True).returncode != 0:
            self.skipTest(f"{BASE_IMAGE} is missing (scripts/build-base-image.sh builds it)")
        try:
            socket.getaddrinfo("sandbox-8080.localhost", 80)
        except OSError:
            self.skipTest("*.localhost does not resolve (scripts/ensure-names.sh makes it)")
        run = harness.Run("pyreadme")
        self.addCleanup(run.teardown)
        run.setup()
        d = run.start_daemon("readme", ["--default-image", BASE_IMAGE])
        env = {**os.environ, "SANDPIT_ADDR": f"127.0.0.1:{d.api_port}", "SANDPIT_TOKEN": d.token}
        out = subprocess.run([sys.executable, "-c", quickstart()], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}\ndaemon:\n{d.log()[-4000:]}")
        lines = out.stdout.splitlines()
        self.assertEqual(lines[:5], ["hi", "stdout tick 1", "stdout tick 2", "stdout tick 3", "exit code 0"], out.stdout)
        self.assertEqual(lines[5], "['index.html']")
        self.assertRegex(lines[6], rf"^http://\S+-8080\.localhost:{d.proxy_port} False$")
        self.assertEqual(lines[7:], ["hello from the sandbox", "409 name_conflict"])
        self.assertEqual(run.containers(), [], "the quickstart deleted its sandbox")


if __name__ == "__main__":
    unittest.main()
