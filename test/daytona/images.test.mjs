// Daytona's declarative Image builder and snapshots, through the official
// SDK, unmodified, against a real daemon and the real engine: the SDK
// uploads an Image's local files to the daemon's object storage, the daemon
// builds the Image's Dockerfile, and sandboxes run in what it built.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Daytona, Image, DaytonaError, DaytonaNotFoundError, DaytonaConflictError } from '@daytonaio/sdk';
import { startDaemon, testImage } from './daemon.mjs';

let d; // the daemon
let daytona; // the SDK client
let dir; // local files the Images add
const suite = randomBytes(4).toString('hex');

before(async () => {
  d = await startDaemon();
  daytona = new Daytona({ apiUrl: d.apiUrl, apiKey: d.token });
  dir = mkdtempSync(join(tmpdir(), 'sandpit-daytona-images-'));
});

after(async () => {
  try {
    if (daytona && Symbol.asyncDispose) await daytona[Symbol.asyncDispose]();
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (d) {
      if (process.env.SANDPIT_LOG_ON_FAIL && process.exitCode) process.stderr.write(d.logs.join(''));
      await d.stop();
    }
  }
});

// run executes a command in a sandbox and returns its trimmed output.
async function run(sb, cmd) {
  const res = await sb.process.executeCommand(cmd);
  assert.equal(res.exitCode, 0, `${cmd}: ${res.result}`);
  return res.result.trim();
}

const snapName = `snap-${suite}`;
const marker = randomBytes(6).toString('hex');

function snapImage() {
  const file = join(dir, 'hello.txt');
  writeFileSync(file, `hello ${marker}\n`);
  return Image.base(testImage)
    .runCommands(`echo built-${marker} > /built.txt`, 'mkdir -p /app')
    .addLocalFile(file, '/app/hello.txt');
}

test('snapshot.create builds an Image with a local file, its log reaches onLogs, and create({snapshot}) runs in it', async () => {
  const logs = [];
  const snap = await daytona.snapshot.create({ name: snapName, image: snapImage() }, { onLogs: (l) => logs.push(l), timeout: 120 });
  assert.equal(snap.state, 'active');
  assert.equal(snap.name, snapName);
  const text = logs.join('\n');
  // The engine's own build output, streamed while it builds, between the
  // SDK's state lines.
  assert.match(text, new RegExp(`RUN echo built-${marker}`));
  assert.match(text, new RegExp(`COPY ${dir}/hello.txt /app/hello.txt`));
  assert.equal(logs.at(-1), `Created snapshot ${snapName} (active)`);

  const sb = await daytona.create({ snapshot: snapName, labels: { suite } });
  try {
    assert.equal(sb.state, 'started');
    assert.equal(await run(sb, 'cat /built.txt'), `built-${marker}`);
    assert.equal(await run(sb, 'cat /app/hello.txt'), `hello ${marker}`);
  } finally {
    await sb.delete();
  }
});

test('a second snapshot.create of the same name and Image is the same snapshot, not a second build', async () => {
  const first = await daytona.snapshot.get(snapName);
  const again = await daytona.snapshot.create({ name: snapName, image: snapImage() }, { timeout: 120 });
  assert.equal(again.id, first.id);
  assert.equal(again.state, 'active');
  // The build replayed the first one's image rather than building again.
  const url = (await (await fetch(`${d.apiUrl}/snapshots/${again.id}/build-logs-url`, { headers: { authorization: `Bearer ${d.token}` } })).json()).url;
  const log = await (await fetch(url, { headers: { authorization: `Bearer ${d.token}` } })).text();
  assert.match(log, /reusing its image/);
  const named = (await daytona.snapshot.list(1, 1000)).items.filter((s) => s.name === snapName);
  assert.equal(named.length, 1);
});

test('snapshot.list, get by id and name, activate, delete', async () => {
  const byName = await daytona.snapshot.get(snapName);
  const byId = await daytona.snapshot.get(byName.id);
  assert.equal(byId.name, snapName);
  const list = await daytona.snapshot.list();
  assert.ok(list.items.some((s) => s.id === byName.id && s.state === 'active'));
  assert.equal(list.total, list.items.length);
  const activated = await daytona.snapshot.activate(byName);
  assert.equal(activated.state, 'active');
  await daytona.snapshot.delete(byName);
  await assert.rejects(daytona.snapshot.get(snapName), (err) => err instanceof DaytonaNotFoundError && err.message.includes(snapName));
});

test('snapshot.create of an existing image by name registers it', async () => {
  const name = `reg-${suite}`;
  const snap = await daytona.snapshot.create({ name, image: testImage }, { timeout: 120 });
  assert.equal(snap.state, 'active');
  const sb = await daytona.create({ snapshot: name, labels: { suite } });
  try {
    assert.equal(await run(sb, 'echo ok'), 'ok');
  } finally {
    await sb.delete();
  }
  await daytona.snapshot.delete(name);
});

test('an Image given to create is built on the fly, its log reaches onSnapshotCreateLogs; a large file goes up in parts', async () => {
  const big = join(dir, 'big.bin');
  // Over the SDK's 5 MiB threshold: a multipart upload.
  writeFileSync(big, randomBytes(6 * 1024 * 1024 + 123));
  const m = randomBytes(6).toString('hex');
  const image = Image.base(testImage).runCommands(`echo fly-${m} > /fly.txt`).addLocalFile(big, '/big.bin');
  const logs = [];
  const sb = await daytona.create({ image, labels: { suite } }, { onSnapshotCreateLogs: (l) => logs.push(l), timeout: 120 });
  try {
    assert.equal(sb.state, 'started');
    assert.match(logs.join('\n'), new RegExp(`RUN echo fly-${m}`));
    assert.equal(await run(sb, 'cat /fly.txt'), `fly-${m}`);
    assert.equal(await run(sb, 'wc -c < /big.bin'), String(6 * 1024 * 1024 + 123));
  } finally {
    await sb.delete();
  }
  // The same Image again starts from what was built: no upload, no build.
  const again = await daytona.create({ image, labels: { suite } }, { timeout: 120 });
  try {
    assert.equal(await run(again, 'cat /fly.txt'), `fly-${m}`);
  } finally {
    await again.delete();
  }
});

test('concurrent create({name, image: Image}) with one name make exactly one sandbox', async () => {
  const name = `race-${suite}`;
  const image = Image.base(testImage).runCommands(`echo race-${suite} > /race.txt`);
  const results = await Promise.allSettled([1, 2, 3].map(() => daytona.create({ name, image, labels: { suite } }, { timeout: 120 })));
  const won = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
  const lost = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
  try {
    assert.equal(won.length, 1, JSON.stringify(lost.map((e) => e.message)));
    for (const e of lost) assert.ok(e instanceof DaytonaConflictError, e.message);
    assert.equal(await run(won[0], 'cat /race.txt'), `race-${suite}`);
    const named = [];
    for await (const sb of daytona.list({ labels: { suite } })) if (sb.name === name) named.push(sb);
    assert.equal(named.length, 1);
  } finally {
    for (const sb of won) await sb.delete();
  }
});

test('a failing build surfaces its reason, for snapshot.create and for create', async () => {
  const name = `fail-${suite}`;
  const failing = Image.base(testImage).runCommands('echo about to fail', 'exit 3');
  const logs = [];
  await assert.rejects(daytona.snapshot.create({ name, image: failing }, { onLogs: (l) => logs.push(l), timeout: 120 }), (err) => {
    assert.ok(err instanceof DaytonaError);
    assert.match(err.message, new RegExp(`Failed to create snapshot\\. Name: ${name} Reason: .*exit 3.*non-zero code: 3`));
    return true;
  });
  assert.match(logs.join('\n'), /about to fail/);
  const snap = await daytona.snapshot.get(name);
  assert.equal(snap.state, 'build_failed');
  assert.match(snap.errorReason, /non-zero code: 3/);

  const flogs = [];
  await assert.rejects(daytona.create({ image: failing, labels: { suite } }, { onSnapshotCreateLogs: (l) => flogs.push(l), timeout: 120 }), (err) => {
    assert.ok(err instanceof DaytonaError);
    assert.match(err.message, /failed to start with status: build_failed, error reason: .*non-zero code: 3/);
    return true;
  });
  assert.match(flogs.join('\n'), /about to fail/);
  await daytona.snapshot.delete(name);
});

test('object storage takes only the session token it handed out', async () => {
  const auth = { authorization: `Bearer ${d.token}` };
  const access = await (await fetch(`${d.apiUrl}/object-storage/push-access`, { headers: auth })).json();
  assert.ok(access.storageUrl.startsWith(d.apiUrl));
  assert.notEqual(access.sessionToken, d.token);
  const list = `${access.storageUrl}/${access.bucket}/?list-type=2&prefix=${access.organizationId}/0123456789abcdef/`;
  const ok = await fetch(list, { headers: { 'x-amz-security-token': access.sessionToken } });
  assert.equal(ok.status, 200);
  assert.match(await ok.text(), /<KeyCount>0<\/KeyCount>/);
  const forged = access.sessionToken.slice(0, -2) + (access.sessionToken.endsWith('AA') ? 'AB' : 'AA');
  for (const headers of [{}, { 'x-amz-security-token': forged }, { 'x-amz-security-token': d.token }, auth]) {
    const res = await fetch(list, { headers });
    assert.equal(res.status, 403);
    assert.match(await res.text(), /AccessDenied/);
  }
  // Not a tar: refused when it arrives rather than failing a build later.
  const put = await fetch(`${access.storageUrl}/${access.bucket}/${access.organizationId}/0123456789abcdef/context.tar`, {
    method: 'PUT',
    headers: { 'x-amz-security-token': access.sessionToken },
    body: 'not a tar archive at all',
  });
  assert.equal(put.status, 400);
});

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

test("owners: a snapshot and a building sandbox are their owner's; one name is a snapshot per owner", async () => {
  const aKey = await tokenFor('alice-images', 'alice');
  const bKey = await tokenFor('bob-images', 'bob');
  const A = new Daytona({ apiUrl: d.apiUrl, apiKey: aKey });
  const B = new Daytona({ apiUrl: d.apiUrl, apiKey: bKey });
  const name = `own-${suite}`;
  try {
    const a = await A.snapshot.create({ name, image: Image.base(testImage).runCommands('echo alice > /who') }, { timeout: 120 });
    await assert.rejects(B.snapshot.get(name), DaytonaNotFoundError);
    await assert.rejects(B.snapshot.get(a.id), DaytonaNotFoundError);
    assert.ok(!(await B.snapshot.list()).items.some((s) => s.id === a.id));
    const logs = await fetch(`${d.apiUrl}/snapshots/${a.id}/build-logs-url`, { headers: { authorization: `Bearer ${bKey}` } });
    assert.equal(logs.status, 404);
    await assert.rejects(B.snapshot.delete(a), DaytonaNotFoundError);
    // Bob's snapshot of the same name is his own.
    const b = await B.snapshot.create({ name, image: Image.base(testImage).runCommands('echo bob > /who') }, { timeout: 120 });
    assert.notEqual(b.id, a.id);
    for (const [client, who] of [[A, 'alice'], [B, 'bob']]) {
      const sb = await client.create({ snapshot: name, labels: { suite } });
      try {
        assert.equal(await run(sb, 'cat /who'), who);
      } finally {
        await sb.delete();
      }
    }
    // A sandbox still building its image is not Bob's to see.
    const res = await fetch(`${d.apiUrl}/sandbox`, {
      method: 'POST',
      headers: { authorization: `Bearer ${aKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ buildInfo: { dockerfileContent: `FROM ${testImage}\nRUN sleep 2\n` }, labels: { suite } }),
    });
    const pending = await res.json();
    assert.equal(pending.state, 'pending_build', JSON.stringify(pending));
    await assert.rejects(B.get(pending.id), DaytonaNotFoundError);
    const blogs = await fetch(`${d.apiUrl}/sandbox/${pending.id}/build-logs-url`, { headers: { authorization: `Bearer ${bKey}` } });
    assert.equal(blogs.status, 404);
    const mine = await A.get(pending.id);
    assert.ok(['pending_build', 'building_snapshot', 'creating', 'started'].includes(mine.state), mine.state);
    await mine.waitUntilStarted(120);
    await mine.delete();
    await A.snapshot.delete(name);
    await B.snapshot.delete(name);
  } finally {
    for (const c of [A, B]) if (Symbol.asyncDispose) await c[Symbol.asyncDispose]();
  }
});
