// The official Daytona TypeScript SDK, unmodified, against a real sandpit
// daemon and a real Docker engine. Tests run in order and share one daemon;
// the 'demo' sandbox made by the first test is used by the ones after it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import {
  Daytona,
  DaytonaConflictError,
  DaytonaNotFoundError,
  DaytonaFileNotFoundError,
  DaytonaTimeoutError,
  DaytonaBadRequestError,
  DaytonaAuthenticationError,
} from '@daytonaio/sdk';
import { startDaemon, containersWithLabel, testImage } from './daemon.mjs';

const here = dirname(fileURLToPath(import.meta.url));

let d; // the daemon
let daytona; // the SDK client
let demo; // the 'demo' sandbox
// suite labels every sandbox of this run, so that list assertions are not
// disturbed by anything else the daemon might hold.
const suite = 'daytona-' + randomBytes(4).toString('hex');

before(async () => {
  d = await startDaemon();
  daytona = new Daytona({ apiUrl: d.apiUrl, apiKey: d.token });
});

// dispose closes a client's event socket (Symbol.asyncDispose is missing
// before Node 20).
async function dispose(client) {
  if (client && Symbol.asyncDispose) await client[Symbol.asyncDispose]();
}

after(async () => {
  await dispose(daytona);
  if (d) {
    if (process.env.SANDPIT_LOG_ON_FAIL && process.exitCode) process.stderr.write(d.logs.join(''));
    await d.stop();
  }
});

// rejectsWith asserts that p rejects with an instance of cls and returns
// the error.
async function rejectsWith(p, cls) {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof cls, `expected ${cls.name}, got ${err?.constructor?.name}: ${err?.message}`);
    return err;
  }
  assert.fail(`expected ${cls.name}, but the call succeeded`);
}

async function collect(iter) {
  const out = [];
  for await (const x of iter) out.push(x);
  return out;
}

test('create({name: "demo"}) returns a started sandbox with the full model', async () => {
  demo = await daytona.create({ name: 'demo', labels: { suite, role: 'demo' }, envVars: { GREETING: 'hi there' } });
  assert.equal(demo.name, 'demo');
  assert.equal(demo.state, 'started');
  assert.match(demo.id, /^[a-z0-9-]+$/);
  for (const f of ['organizationId', 'user', 'target', 'toolboxProxyUrl']) {
    assert.equal(typeof demo[f], 'string', f);
  }
  for (const f of ['cpu', 'gpu', 'memory', 'disk']) {
    assert.equal(typeof demo[f], 'number', f);
  }
  assert.equal(typeof demo.public, 'boolean');
  assert.equal(typeof demo.networkBlockAll, 'boolean');
  assert.deepEqual(demo.env, { GREETING: 'hi there' });
  assert.equal(demo.labels.suite, suite);
  assert.equal(demo.toolboxProxyUrl, `${d.apiUrl}/toolbox`);
});

test('process.executeCommand("echo hello") returns hello and exit code 0', async () => {
  const res = await demo.process.executeCommand('echo hello');
  assert.equal(res.exitCode, 0);
  assert.equal(res.result.trim(), 'hello');
  assert.equal(res.artifacts.stdout.trim(), 'hello');
});

test('executeCommand: a failing command returns its exit code; output is combined in order; env and cwd apply', async () => {
  const fail = await demo.process.executeCommand('echo out; echo err >&2; exit 7');
  assert.equal(fail.exitCode, 7);
  assert.equal(fail.result, 'out\nerr\n');

  const env = await demo.process.executeCommand('echo "$GREETING/$EXTRA"', undefined, { EXTRA: 'x y' });
  assert.equal(env.result.trim(), 'hi there/x y');

  const cwd = await demo.process.executeCommand('pwd', '/tmp');
  assert.equal(cwd.result.trim(), '/tmp');
});

test('executeCommand: a command past its timeout is killed and reported as a timeout (408)', async () => {
  const started = Date.now();
  const err = await rejectsWith(demo.process.executeCommand('sleep 30', undefined, undefined, 1), DaytonaTimeoutError);
  assert.equal(err.statusCode, 408);
  // Daytona's daemon's own sentence, which clients match on.
  assert.match(err.message, /command execution timeout/);
  assert.ok(Date.now() - started < 15_000, 'the timeout was not enforced');
});

test('fs.uploadFile then fs.downloadFile are byte-identical; listFiles lists the file', async () => {
  // Every byte value, plus random data across several multipart buffer sizes.
  const all = Buffer.alloc(256);
  for (let i = 0; i < 256; i++) all[i] = i;
  const content = Buffer.concat([all, randomBytes(3 * 1024 * 1024 + 17), Buffer.from('\r\n--boundary\r\n')]);
  await demo.fs.uploadFile(content, '/tmp/daytona-test/dir/blob.bin');
  const got = await demo.fs.downloadFile('/tmp/daytona-test/dir/blob.bin');
  assert.ok(Buffer.isBuffer(got));
  assert.equal(got.length, content.length);
  assert.ok(got.equals(content), 'downloaded bytes differ from uploaded bytes');

  await demo.fs.uploadFile(Buffer.from('small'), '/tmp/daytona-test/dir/a.txt');
  const files = await demo.fs.listFiles('/tmp/daytona-test/dir');
  const byName = Object.fromEntries(files.map((f) => [f.name, f]));
  assert.deepEqual(Object.keys(byName).sort(), ['a.txt', 'blob.bin']);
  assert.equal(byName['blob.bin'].isDir, false);
  assert.equal(byName['blob.bin'].size, content.length);
  assert.equal(byName['a.txt'].size, 5);
  const home = await demo.getUserHomeDir();
  assert.equal((await demo.process.executeCommand('pwd')).result.trim(), home);
  const parent = await demo.fs.listFiles('/tmp/daytona-test');
  assert.equal(parent.find((f) => f.name === 'dir')?.isDir, true);
});

test('fs: several files in one upload and one download; a missing file is a per-file error', async () => {
  await demo.fs.uploadFiles([
    { source: Buffer.from('one'), destination: '/tmp/daytona-test/multi/1.txt' },
    { source: Buffer.from('two'), destination: '/tmp/daytona-test/multi/ünïcode name.txt' },
  ]);
  const res = await demo.fs.downloadFiles([
    { source: '/tmp/daytona-test/multi/1.txt' },
    { source: '/tmp/daytona-test/multi/ünïcode name.txt' },
    { source: '/tmp/daytona-test/multi/missing.txt' },
  ]);
  assert.equal(res[0].result.toString(), 'one');
  assert.equal(res[1].result.toString(), 'two');
  assert.equal(res[2].result, undefined);
  assert.match(res[2].error, /missing\.txt/);
  await rejectsWith(demo.fs.downloadFile('/tmp/daytona-test/multi/missing.txt'), DaytonaFileNotFoundError);
  await rejectsWith(demo.fs.listFiles('/tmp/daytona-test/no-such-dir'), DaytonaNotFoundError);
});

test('daytona.get("demo") returns the same sandbox as get(id)', async () => {
  const byName = await daytona.get('demo');
  assert.equal(byName.id, demo.id);
  const byId = await daytona.get(demo.id);
  assert.equal(byId.name, 'demo');
  await rejectsWith(daytona.get('no-such-sandbox-' + suite), DaytonaNotFoundError);
});

test('a second create({name: "demo"}) is a DaytonaConflictError with Daytona\'s message', async () => {
  const err = await rejectsWith(daytona.create({ name: 'demo', labels: { suite } }), DaytonaConflictError);
  assert.equal(err.statusCode, 409);
  assert.equal(err.message, 'Sandbox with name demo already exists');
});

test('list filters by labels; setLabels replaces labels', async () => {
  const other = await daytona.create({ labels: { suite, role: 'other' } });
  try {
    assert.equal(other.name, other.id, 'an unnamed sandbox is named after its id');
    const mine = await collect(daytona.list({ labels: { suite } }));
    assert.deepEqual(mine.map((s) => s.id).sort(), [demo.id, other.id].sort());
    const demos = await collect(daytona.list({ labels: { suite, role: 'demo' } }));
    assert.deepEqual(demos.map((s) => s.id), [demo.id]);
    assert.equal(demos[0].state, 'started');

    const labels = await demo.setLabels({ suite, role: 'renamed', extra: 'yes' });
    assert.deepEqual(labels, { suite, role: 'renamed', extra: 'yes' });
    assert.deepEqual((await daytona.get('demo')).labels, { suite, role: 'renamed', extra: 'yes' });
    const renamed = await collect(daytona.list({ labels: { suite, extra: 'yes' } }));
    assert.deepEqual(renamed.map((s) => s.id), [demo.id]);
    assert.deepEqual(await collect(daytona.list({ labels: { suite, role: 'demo' } })), []);

    // Paging: one per page still finds both.
    const paged = await collect(daytona.list({ labels: { suite }, limit: 1 }));
    assert.deepEqual(paged.map((s) => s.id).sort(), [demo.id, other.id].sort());
  } finally {
    await other.delete();
  }
});

test('getPreviewLink exposes a port through the proxy', async () => {
  await demo.process.executeCommand(
    'mkdir -p /tmp/www && echo preview-ok > /tmp/www/index.html && (busybox httpd -p 8080 -h /tmp/www &)',
  );
  const link = await demo.getPreviewLink(8080);
  const url = new URL(link.url);
  assert.ok(url.hostname.startsWith(`${demo.id}-8080.`), link.url);
  // *.localhost may not resolve here, so the request goes to the proxy's
  // address with the preview host in the Host header.
  let body = '';
  for (let i = 0; i < 50; i++) {
    body = await new Promise((res, rej) => {
      const req = request({ host: '127.0.0.1', port: d.proxyPort, path: '/', headers: { Host: url.host } }, (r) => {
        let b = '';
        r.setEncoding('utf8');
        r.on('data', (c) => (b += c));
        r.on('end', () => res(r.statusCode === 200 ? b : ''));
      });
      req.on('error', rej);
      req.end();
    });
    if (body) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(body.trim(), 'preview-ok');
});

test('stop then start; the filesystem survives', async () => {
  await demo.process.executeCommand('echo kept > /tmp/kept.txt');
  await demo.stop();
  assert.equal(demo.state, 'stopped');
  assert.equal((await daytona.get('demo')).state, 'stopped');
  await demo.start();
  assert.equal(demo.state, 'started');
  const res = await demo.process.executeCommand('cat /tmp/kept.txt');
  assert.equal(res.result.trim(), 'kept');
});

test('image: "X" selects the image as it is; an unknown snapshot is a 400', async () => {
  const sb = await daytona.create({ image: testImage, labels: { suite } });
  try {
    assert.equal(sb.state, 'started');
    assert.equal((await sb.process.executeCommand('echo from-image')).result.trim(), 'from-image');
  } finally {
    await sb.delete();
  }
  // An Image of more than a FROM line is built first: images.test.mjs.
  const snap = await rejectsWith(daytona.create({ snapshot: 'no-such-snapshot', labels: { suite } }), DaytonaBadRequestError);
  assert.match(snap.message, /no-such-snapshot/);
});

test('a wrong API key is a DaytonaAuthenticationError', async () => {
  const bad = new Daytona({ apiUrl: d.apiUrl, apiKey: 'wrong' });
  try {
    await rejectsWith(bad.get('demo'), DaytonaAuthenticationError);
  } finally {
    await dispose(bad);
  }
});

test('delete removes the sandbox', async () => {
  const id = demo.id;
  await demo.delete();
  await rejectsWith(daytona.get('demo'), DaytonaNotFoundError);
  await rejectsWith(daytona.get(id), DaytonaNotFoundError);
  assert.deepEqual(containersWithLabel(d.runLabel).filter((c) => c.sandboxId === id), []);
});

test('10 concurrent create({name}) with one name make exactly one sandbox', async () => {
  const name = 'race-' + randomBytes(4).toString('hex');
  const before = new Set(containersWithLabel(d.runLabel).map((c) => c.sandboxId));
  const results = await Promise.allSettled(
    Array.from({ length: 10 }, () => daytona.create({ name, labels: { suite, race: name } })),
  );
  const won = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
  const lost = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
  try {
    assert.equal(won.length, 1, `winners: ${won.length}; errors: ${lost.map((e) => e.message).join(' | ')}`);
    for (const e of lost) {
      assert.ok(e instanceof DaytonaConflictError, `${e?.constructor?.name}: ${e?.message}`);
      assert.equal(e.message, `Sandbox with name ${name} already exists`);
    }
    const made = containersWithLabel(d.runLabel).filter((c) => !before.has(c.sandboxId));
    assert.deepEqual(made.map((c) => c.sandboxId), [won[0].id], 'docker has exactly the winner\'s container');
    const listed = await collect(daytona.list({ labels: { race: name } }));
    assert.deepEqual(listed.map((s) => s.id), [won[0].id]);
  } finally {
    for (const sb of won) await sb.delete();
  }
});

test('an SDK script exits within 5 s of its last call (the event socket handshake works)', async (t) => {
  const child = spawn(process.execPath, [join(here, 'exit-probe.mjs')], {
    cwd: here,
    env: { ...process.env, PROBE_API_URL: d.apiUrl, PROBE_API_KEY: d.token, PROBE_LABEL: suite },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  let lastCall = 0;
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (c) => {
    out += c;
    if (!lastCall && out.includes('LAST_CALL_DONE')) {
      lastCall = Date.now();
      // A failed handshake keeps Node alive for minutes; 30 s tells.
      setTimeout(() => child.kill('SIGKILL'), 30_000).unref();
    }
  });
  child.stderr.on('data', (c) => (err += c));
  // The probe's own calls (a create) get a generous bound.
  const killer = setTimeout(() => child.kill('SIGKILL'), 90_000);
  const code = await new Promise((res) => child.once('exit', (c, sig) => res(c ?? sig)));
  const exitedAt = Date.now();
  clearTimeout(killer);
  const probeId = /LAST_CALL_DONE (\S+)/.exec(out)?.[1];
  if (probeId) await (await daytona.get(probeId)).delete();
  assert.ok(lastCall > 0, `probe printed no marker (exit ${code}): ${out} ${err}`);
  assert.equal(code, 0, `probe failed (exit ${code}, ${exitedAt - lastCall} ms after its last call): ${err}`);
  const lag = exitedAt - lastCall;
  t.diagnostic(`the SDK process exited ${lag} ms after its last call`);
  assert.ok(lag < 5000, `the SDK process took ${lag} ms to exit after its last call`);
});

// tokenFor mints a personal access token for owner through the native admin
// API, with the daemon's admin token.
async function tokenFor(name, owner) {
  const res = await fetch(`${d.base}/v1/tokens`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${d.token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name, owner }),
  });
  const body = await res.json();
  assert.equal(res.status, 201, JSON.stringify(body));
  return body.token;
}

test("owners: A's sandbox is not found for B by id or by name, and B's list never includes it", async () => {
  const A = new Daytona({ apiUrl: d.apiUrl, apiKey: await tokenFor('alice-daytona', 'alice') });
  const B = new Daytona({ apiUrl: d.apiUrl, apiKey: await tokenFor('bob-daytona', 'bob') });
  const sb = await A.create({ name: `alice-${suite}`, labels: { suite, owner: 'alice' } });
  try {
    await rejectsWith(B.get(sb.id), DaytonaNotFoundError);
    await rejectsWith(B.get(sb.name), DaytonaNotFoundError);
    assert.ok(!(await collect(B.list({ labels: { suite } }))).some((s) => s.id === sb.id));
    assert.ok(!(await collect(B.list())).some((s) => s.id === sb.id));
    assert.deepEqual((await collect(A.list({ labels: { suite, owner: 'alice' } }))).map((s) => s.id), [sb.id]);
    assert.equal((await A.get(sb.name)).id, sb.id);
    // Names are unique per daemon; the conflict does not reveal A's id.
    const err = await rejectsWith(B.create({ name: sb.name }), DaytonaConflictError);
    assert.ok(!err.message.includes(sb.id), err.message);
    // The admin token sees every owner's sandboxes.
    assert.equal((await daytona.get(sb.id)).id, sb.id);
  } finally {
    await sb.delete();
    await dispose(A);
    await dispose(B);
  }
});

// waitFor polls a condition on local state only (no API call), so what it
// sees can only have come through the event socket.
async function waitFor(what, cond, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`timed out waiting for ${what}`);
}

// nativeCall calls the daemon's other APIs with the same token.
async function nativeCall(method, path, headers, body) {
  const res = await fetch(d.base + path, { method, headers: { 'Content-Type': 'application/json', ...headers }, body });
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${await res.text()}`);
}

test('the event socket announces changes made outside the Daytona API: a /v1 stop and a sweeper expiry', async () => {
  const stopped = await daytona.create({ labels: { suite, role: 'events-stop' } });
  const expiring = await daytona.create({ labels: { suite, role: 'events-expire' } });
  try {
    assert.equal(stopped.state, 'started');
    await nativeCall('POST', `/v1/sandboxes/${stopped.id}/stop`, { Authorization: `Bearer ${d.token}` });
    await waitFor('sandbox.state.updated to stopped', () => stopped.state === 'stopped');

    // The E2B API sets the end time; the sweeper then deletes the sandbox.
    await nativeCall('POST', `/e2b/sandboxes/${expiring.id}/timeout`, { 'X-API-KEY': d.token }, JSON.stringify({ timeout: 1 }));
    await waitFor('sandbox.state.updated to destroyed', () => expiring.state === 'destroyed');
  } finally {
    await stopped.delete().catch(() => {});
    await expiring.delete().catch(() => {});
  }
});
