// The less common Daytona SDK calls through the official SDK, unmodified, on
// a real daemon and Docker: expiring a signed preview URL early (also across
// a daemon restart), input to a running session command, and the calls
// Sandpit answers with 501. This file runs its own daemon because it
// restarts it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Daytona } from '@daytonaio/sdk';
import { startDaemon, proxyGet } from './daemon.mjs';

let d;
let daytona;
let sb;
const suite = 'extras-' + randomBytes(4).toString('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  d = await startDaemon();
  daytona = new Daytona({ apiUrl: d.apiUrl, apiKey: d.token });
  sb = await daytona.create({ labels: { suite } });
});

after(async () => {
  try {
    if (sb) await sb.delete();
  } finally {
    if (daytona && Symbol.asyncDispose) await daytona[Symbol.asyncDispose]();
    if (d) {
      if (process.env.SANDPIT_LOG_ON_FAIL && process.exitCode) process.stderr.write(d.logs.join(''));
      await d.stop();
    }
  }
});

// getUntil asks the proxy for host until it answers 200 (the server in the
// sandbox may still be starting) and returns the last answer.
async function getUntil(host) {
  let res;
  for (let i = 0; i < 50; i++) {
    res = await proxyGet(d.proxyPort, host);
    if (res.status === 200) break;
    await sleep(100);
  }
  return res;
}

test('expireSignedPreviewUrl: the token stops working at once and stays expired across a restart; others keep working', { timeout: 120_000 }, async () => {
  await sb.process.executeCommand('mkdir -p /tmp/www && echo expire-ok > /tmp/www/index.html && (busybox httpd -p 8082 -h /tmp/www &)');
  const a = await sb.getSignedPreviewUrl(8082, 3600);
  // A different expiry makes a different token (two asked in the same
  // second with the same expiry are the same token).
  const b = await sb.getSignedPreviewUrl(8082, 3000);
  assert.notEqual(a.token, b.token);
  const hostA = new URL(a.url).host;
  const hostB = new URL(b.url).host;
  assert.equal((await getUntil(hostA)).body.trim(), 'expire-ok');
  assert.equal((await getUntil(hostB)).status, 200);

  // Bad input is a 400 and revokes nothing: a token of another port, an
  // altered token, another sandbox's id in it.
  const other = await sb.getSignedPreviewUrl(8083, 3600);
  const altered = a.token.slice(0, -1) + (a.token.endsWith('a') ? 'b' : 'a');
  for (const [port, token] of [[8082, other.token], [8082, altered], [8082, 'not-a-token'], [0, a.token]]) {
    await assert.rejects(sb.expireSignedPreviewUrl(port, token), (err) => {
      assert.equal(err.statusCode, 400, `${port} ${token}: ${err.message}`);
      return true;
    });
  }
  assert.equal((await proxyGet(d.proxyPort, hostA)).status, 200);

  await sb.expireSignedPreviewUrl(8082, a.token);
  assert.equal((await proxyGet(d.proxyPort, hostA)).status, 403);
  assert.equal((await proxyGet(d.proxyPort, hostB)).status, 200, 'another token of the same port still works');
  // Expiring again is a no-op success.
  await sb.expireSignedPreviewUrl(8082, a.token);

  await d.restart();
  assert.equal((await proxyGet(d.proxyPort, hostA)).status, 403, 'the revocation survives a restart');
  assert.equal((await getUntil(hostB)).status, 200);
});

test('sendSessionCommandInput feeds a running async command\'s stdin', { timeout: 60_000 }, async () => {
  const sid = 'input-' + randomBytes(3).toString('hex');
  await sb.process.createSession(sid);
  try {
    const run = await sb.process.executeSessionCommand(sid, { command: 'read a; read b; echo "got $a and $b"', runAsync: true });
    assert.ok(run.cmdId);
    await sb.process.sendSessionCommandInput(sid, run.cmdId, 'one\n');
    await sb.process.sendSessionCommandInput(sid, run.cmdId, 'two\n');
    let cmd;
    for (let i = 0; i < 100; i++) {
      cmd = await sb.process.getSessionCommand(sid, run.cmdId);
      if (cmd.exitCode !== undefined && cmd.exitCode !== null) break;
      await sleep(100);
    }
    assert.equal(cmd.exitCode, 0);
    const logs = await sb.process.getSessionCommandLogs(sid, run.cmdId);
    assert.equal(logs.stdout.trim(), 'got one and two');

    // Input to a command that has ended, to an unknown command and to an
    // unknown session: 4xx, and the session keeps working.
    await assert.rejects(sb.process.sendSessionCommandInput(sid, run.cmdId, 'late\n'), (err) => err.statusCode === 409);
    await assert.rejects(sb.process.sendSessionCommandInput(sid, 'nope', 'x'), (err) => err.statusCode === 404);
    await assert.rejects(sb.process.sendSessionCommandInput('no-such-session', run.cmdId, 'x'), (err) => err.statusCode === 404);
    const sync = await sb.process.executeSessionCommand(sid, { command: 'echo still' });
    assert.equal(sync.stdout.trim(), 'still');
    await assert.rejects(sb.process.sendSessionCommandInput(sid, sync.cmdId, 'x'), (err) => err.statusCode === 409);
  } finally {
    await sb.process.deleteSession(sid);
  }
});

const baseImage = process.env.SANDPIT_BASE_IMAGE_REF || 'sandpit/base:latest';

test('codeInterpreter: contexts keep state apart; runCode streams output, reports errors, times out', { timeout: 180_000 }, async () => {
  const c = await daytona.create({ image: baseImage, labels: { suite } });
  try {
    const ci = c.codeInterpreter;
    // Without a context: the default one, which keeps state between calls.
    assert.equal((await ci.runCode('x = 6 * 7')).stderr, '');
    const first = await ci.runCode('print(x)');
    assert.equal(first.stdout, '42\n');

    const ctx = await ci.createContext('/tmp');
    assert.ok(ctx.id);
    assert.equal(ctx.cwd, '/tmp');
    assert.equal(ctx.language, 'python');
    const listed = await ci.listContexts();
    assert.deepEqual(listed.map((x) => x.id), [ctx.id]);

    // Its own namespace: x is not defined there; its cwd is /tmp.
    const r1 = await ci.runCode('import os\ny = "in-context"\nprint(os.getcwd())\nprint(x)', { context: ctx });
    assert.equal(r1.stdout, '/tmp\n');
    assert.equal(r1.error.name, 'NameError');
    assert.match(r1.error.traceback, /NameError/);
    const chunks = [];
    const r2 = await ci.runCode('import sys, os\nprint(y, os.environ["GREETING"])\nprint("oops", file=sys.stderr)', {
      context: ctx,
      envs: { GREETING: 'hi' },
      onStdout: (m) => chunks.push(m.output),
    });
    assert.equal(r2.stdout, 'in-context hi\n');
    assert.equal(r2.stderr, 'oops\n');
    assert.equal(r2.error, undefined);
    assert.equal(chunks.join(''), 'in-context hi\n');

    // A timeout interrupts the code and keeps the context.
    await assert.rejects(ci.runCode('import time\ntime.sleep(30)', { context: ctx, timeout: 1 }), (err) => err.name === 'DaytonaTimeoutError');
    assert.equal((await ci.runCode('print(y)', { context: ctx })).stdout, 'in-context\n');

    // Bad input: a context that does not exist, empty code, a cwd that is
    // not a directory, another language; nothing is created.
    await assert.rejects(ci.runCode('print(1)', { context: { id: 'nope' } }), /not found/);
    await assert.rejects(c.codeInterpreter.createContext('/no/such/dir'), (err) => err.statusCode === 400);
    await assert.rejects(c.codeInterpreter.createContext('/etc/hostname'), (err) => err.statusCode === 400);
    assert.equal((await ci.listContexts()).length, 1);

    await ci.deleteContext(ctx);
    assert.deepEqual(await ci.listContexts(), []);
    await assert.rejects(ci.deleteContext(ctx), (err) => err.statusCode === 404);
    await assert.rejects(ci.runCode('print(y)', { context: ctx }), /not found/);
  } finally {
    await c.delete();
  }
});
