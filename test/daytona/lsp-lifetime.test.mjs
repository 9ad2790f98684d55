// A language server outlives the bound on each of its requests. The daemon
// bounds one LSP request with --daytona-lsp-timeout; that bound must end the
// wait, never the server, so a server that answered once still answers after
// the bound has passed. (The agent takes a stream's deadline as the
// process's own, so a request carrying the bound as a deadline would have
// the server killed that long after it.)
//
// Each request also attaches to the server's output afresh, and language
// servers write a message's header and body in two writes, so a request can
// attach between the two halves of a notification it never asked for; the
// facade must find its answer after such a tail.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { openSuite, closeSuite } from './daemon.mjs';

const boundSeconds = 10;
const baseImage = process.env.SANDPIT_BASE_IMAGE_REF || 'sandpit/base:latest';
const suite = 'lsp-life-' + randomBytes(4).toString('hex');
let d;
let daytona;
let sb;

before(async () => {
  ({ d, daytona } = await openSuite({ args: ['--daytona-lsp-timeout', `${boundSeconds}s`] }));
  sb = await daytona.create({ image: baseImage, labels: { suite } });
});

after(() => closeSuite({ d, daytona, sb }));

test('a language server still answers after its requests\' bound has passed', { timeout: 180_000 }, async (t) => {
  if ((await sb.process.executeCommand('command -v pylsp')).exitCode !== 0) {
    t.skip(`${baseImage} has no pylsp: run scripts/build-base-image.sh`);
    return;
  }
  const src = 'def greet(name):\n    return "hi " + name\n';
  await sb.fs.uploadFile(Buffer.from(src), '/tmp/life/main.py');
  const lsp = await sb.createLspServer('python', '/tmp/life');
  await lsp.start();
  await lsp.didOpen('/tmp/life/main.py');
  const first = await lsp.documentSymbols('/tmp/life/main.py');
  assert.ok(first.some((s) => s.name === 'greet'), JSON.stringify(first));

  // Past the bound of every request made so far (initialize, symbols).
  await sleep((boundSeconds + 2) * 1000);

  const again = await lsp.documentSymbols('/tmp/life/main.py');
  assert.ok(again.some((s) => s.name === 'greet'), JSON.stringify(again));
  const listed = await sb.process.executeCommand('pgrep -c pylsp');
  assert.equal(listed.result.trim(), '1', 'one pylsp, the one started');
  await lsp.stop();
});

// A stand-in language server that writes a notification's header, waits,
// then writes its body, over and over, and answers requests in between:
// what typescript-language-server does with publishDiagnostics, made
// constant so that nearly every request attaches inside a notification.
const splitServer = String.raw`#!/usr/bin/env python3
import json, sys, threading, time
out = sys.stdout.buffer
lock = threading.Lock()
def send(msg, gap=0):
    body = json.dumps(msg).encode()
    with lock:
        out.write(b"Content-Length: %d\r\n\r\n" % len(body)); out.flush()
        time.sleep(gap)
        out.write(body); out.flush()
def chatter():
    while True:
        send({"jsonrpc": "2.0", "method": "window/logMessage", "params": {"type": 4, "message": "Content-Length: 9 " + "x" * 200}}, 0.3)
        time.sleep(0.02)
threading.Thread(target=chatter, daemon=True).start()
inp = sys.stdin.buffer
while True:
    n = 0
    while True:
        line = inp.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n"):
            break
        k, _, v = line.decode().partition(":")
        if k.strip().lower() == "content-length":
            n = int(v)
    msg = json.loads(inp.read(n))
    if "id" not in msg:
        continue
    # A document named silent.py is never answered: the request's bound
    # must end the wait and say the server went on writing.
    if msg["params"].get("textDocument", {}).get("uri", "").endswith("/silent.py"):
        continue
    result = {"capabilities": {}} if msg["method"] == "initialize" else [
        {"name": "split", "kind": 12, "location": {"uri": msg["params"]["textDocument"]["uri"], "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 5}}}}]
    send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
`;

test('a request that attaches inside a notification still gets its answer', { timeout: 180_000 }, async () => {
  // /usr/local/bin comes before /usr/bin on the image's PATH.
  await sb.fs.uploadFile(Buffer.from(splitServer), '/usr/local/bin/pylsp');
  await sb.fs.setFilePermissions('/usr/local/bin/pylsp', { mode: '755' });
  await sb.fs.uploadFile(Buffer.from('x = 1\n'), '/tmp/split/main.py');
  const lsp = await sb.createLspServer('python', '/tmp/split');
  await lsp.start();
  await lsp.didOpen('/tmp/split/main.py');
  // Each request misses its answer with the chance that it attaches in a
  // 0.3 s gap of every 0.32 s: eight in a row all finding theirs is the fix.
  for (let i = 0; i < 8; i++) {
    const syms = await lsp.documentSymbols('/tmp/split/main.py');
    assert.deepEqual(syms.map((s) => s.name), ['split'], `request ${i + 1}`);
  }

  // A request the server never answers ends at the bound with a 504 that
  // tells a server still writing (this one) from a silent one, and the
  // server answers the next request.
  await sb.fs.uploadFile(Buffer.from('y = 2\n'), '/tmp/split/silent.py');
  await lsp.didOpen('/tmp/split/silent.py');
  const t0 = Date.now();
  await assert.rejects(lsp.documentSymbols('/tmp/split/silent.py'), (err) => {
    assert.equal(err.statusCode, 504, err.message);
    assert.match(err.message, new RegExp(`did not answer textDocument/documentSymbol within ${boundSeconds}s \\(it wrote \\d+ other messages in that time\\)`));
    return true;
  });
  assert.ok(Date.now() - t0 >= boundSeconds * 1000, 'the wait lasted the bound');
  assert.deepEqual((await lsp.documentSymbols('/tmp/split/main.py')).map((s) => s.name), ['split']);
  await lsp.stop();
  await sb.process.executeCommand('rm -f /usr/local/bin/pylsp');
});
