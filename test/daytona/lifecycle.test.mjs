// Lifecycle intervals and resources through the official Daytona SDK, against
// a daemon whose interval unit is shortened to UNIT_MS (a "minute" of the
// intervals), so that auto-stop and auto-delete can be watched happen.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { DaytonaNotFoundError } from '@daytonaio/sdk';
import { openSuite, closeSuite, proxyGet } from './daemon.mjs';

const UNIT_MS = 2000;
let d;
let daytona;
const suite = 'lifecycle-' + randomBytes(4).toString('hex');

before(async () => {
  ({ d, daytona } = await openSuite({ args: ['--daytona-interval-unit', `${UNIT_MS}ms`] }));
});

after(() => closeSuite({ d, daytona }));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// eventually polls check until it returns true or the budget runs out.
async function eventually(what, check, budgetMs) {
  const deadline = Date.now() + budgetMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) assert.fail(`${what} did not happen within ${budgetMs} ms`);
    await sleep(250);
  }
}

test('cpu, memory and disk are the allocation given at create', async () => {
  const sb = await daytona.create({ labels: { suite }, resources: { cpu: 1, memory: 1, disk: 3 }, autoStopInterval: 0 });
  try {
    assert.equal(sb.cpu, 1);
    assert.equal(sb.memory, 1);
    assert.equal(sb.disk, 3);
    const again = await daytona.get(sb.id);
    assert.deepEqual([again.cpu, again.memory, again.disk], [1, 1, 3]);
    // The container really has that memory: the metrics see the limit.
    const m = await sb.getMetricsLatest();
    assert.ok(m.memTotal > 0 && m.memTotal <= 1024 ** 3, `memTotal ${m.memTotal}`);
  } finally {
    await sb.delete();
  }
});

test('intervals given at create and set later are read back, also after a daemon-side refresh', async () => {
  const sb = await daytona.create({ labels: { suite }, autoStopInterval: 0, autoArchiveInterval: 60, autoDeleteInterval: -1 });
  try {
    assert.equal(sb.autoStopInterval, 0);
    assert.equal(sb.autoArchiveInterval, 60);
    assert.equal(sb.autoDeleteInterval, -1);
    await sb.setAutostopInterval(30);
    await sb.setAutoArchiveInterval(120);
    await sb.setAutoDeleteInterval(45);
    const got = await daytona.get(sb.id);
    assert.deepEqual([got.autoStopInterval, got.autoArchiveInterval, got.autoDeleteInterval], [30, 120, 45]);
    await sb.setAutoDeleteInterval(-1);
    await sb.setAutostopInterval(0);
    await sb.refreshData();
    assert.deepEqual([sb.autoStopInterval, sb.autoDeleteInterval], [0, -1]);
    await sb.refreshActivity();
  } finally {
    await sb.delete();
  }
});

test('an idle sandbox with autostop 1 is stopped by the sweeper; activity defers it', async () => {
  const sb = await daytona.create({ labels: { suite }, autoStopInterval: 2 });
  try {
    // Keep it busy for longer than its interval: it must stay started.
    const busyUntil = Date.now() + 3 * UNIT_MS;
    while (Date.now() < busyUntil) {
      await sb.process.executeCommand('true');
      await sleep(UNIT_MS / 4);
    }
    await sb.refreshData();
    assert.equal(sb.state, 'started', 'a sandbox in use was stopped');
    await sb.setAutostopInterval(1);
    await sb.refreshActivity();
    await eventually('auto-stop', async () => {
      await sb.refreshData();
      return sb.state === 'stopped';
    }, 10 * UNIT_MS);
  } finally {
    await sb.delete();
  }
});

test('preview traffic counts as activity', async () => {
  const sb = await daytona.create({ labels: { suite }, autoStopInterval: 0 });
  try {
    await sb.process.executeCommand('mkdir -p /tmp/www && echo hi > /tmp/www/index.html && (busybox httpd -p 8080 -h /tmp/www &)');
    const host = new URL((await sb.getPreviewLink(8080)).url).host;
    await sb.setAutostopInterval(1);
    const busyUntil = Date.now() + 3 * UNIT_MS;
    while (Date.now() < busyUntil) {
      await proxyGet(d.proxyPort, host);
      await sleep(UNIT_MS / 4);
    }
    assert.equal((await daytona.get(sb.id)).state, 'started', 'a sandbox with preview traffic was stopped');
    await eventually('auto-stop once the traffic stopped', async () => (await daytona.get(sb.id)).state === 'stopped', 10 * UNIT_MS);
  } finally {
    await sb.delete();
  }
});

test('autodelete 0 deletes the sandbox when it stops', async () => {
  const sb = await daytona.create({ labels: { suite }, autoStopInterval: 0, autoDeleteInterval: 0 });
  await sb.stop();
  await assert.rejects(daytona.get(sb.id), DaytonaNotFoundError);
});

test('autodelete N deletes a stopped sandbox N minutes after it stopped; autoarchive reports archived', async () => {
  const sb = await daytona.create({ labels: { suite }, autoStopInterval: 0, autoArchiveInterval: 1, autoDeleteInterval: 3 });
  await sb.stop();
  await eventually('archived', async () => (await daytona.get(sb.id)).state === 'archived', 6 * UNIT_MS);
  // The states filter tells archived from stopped.
  const listed = async (state) => {
    const q = new URLSearchParams({ labels: JSON.stringify({ suite }), states: state });
    const res = await fetch(`${d.apiUrl}/sandbox?${q}`, { headers: { Authorization: `Bearer ${d.token}` } });
    return (await res.json()).items.map((x) => x.id);
  };
  assert.ok((await listed('archived')).includes(sb.id));
  assert.ok(!(await listed('stopped')).includes(sb.id));
  await eventually('auto-delete', async () => {
    try {
      await daytona.get(sb.id);
      return false;
    } catch (err) {
      if (err instanceof DaytonaNotFoundError) return true;
      throw err;
    }
  }, 10 * UNIT_MS);
});

test('intervals survive a daemon restart', async () => {
  const sb = await daytona.create({ labels: { suite }, autoStopInterval: 0, autoDeleteInterval: 77, autoArchiveInterval: 88 });
  try {
    await d.restart();
    const got = await daytona.get(sb.id);
    assert.deepEqual([got.autoStopInterval, got.autoArchiveInterval, got.autoDeleteInterval], [0, 88, 77]);
    assert.equal(got.state, 'started');
  } finally {
    await sb.delete();
  }
});

test('bad intervals are a 400 with no change', async () => {
  const sb = await daytona.create({ labels: { suite }, autoStopInterval: 5 });
  try {
    const res = await fetch(`${d.apiUrl}/sandbox/${sb.id}/autostop/abc`, { method: 'POST', headers: { Authorization: `Bearer ${d.token}` } });
    assert.equal(res.status, 400);
    assert.equal((await daytona.get(sb.id)).autoStopInterval, 5);
  } finally {
    await sb.delete();
  }
});

test('archive() commits the filesystem and removes the container; start() restores it with its files, also after a restart', async () => {
  const sb = await daytona.create({ labels: { suite }, autoStopInterval: 0 });
  try {
    await sb.fs.uploadFile(Buffer.from('archived and back\n'), 'kept.txt');
    await sb.stop();
    await sb.archive();
    assert.equal(sb.state, 'archived');
    assert.equal((await daytona.get(sb.id)).state, 'archived');
    // Archiving again is a no-op.
    await sb.archive();
    assert.equal(sb.state, 'archived');
    await d.restart();
    assert.equal((await daytona.get(sb.id)).state, 'archived');
    await sb.start();
    assert.equal(sb.state, 'started');
    assert.equal((await sb.fs.downloadFile('kept.txt')).toString(), 'archived and back\n');
    // A started sandbox archives straight away: it is stopped first.
    await sb.archive();
    assert.equal(sb.state, 'archived');
    await sb.start();
    assert.equal((await sb.fs.downloadFile('kept.txt')).toString(), 'archived and back\n');
  } finally {
    await sb.delete();
  }
});
