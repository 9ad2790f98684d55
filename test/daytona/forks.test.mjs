// Snapshots of a sandbox and forks through the official Daytona SDK,
// unmodified, against a real daemon: sandbox.createSnapshot(name) makes a
// snapshot that snapshot.get and snapshot.list show and create({snapshot})
// runs from; sandbox.fork() copies the files into an independent sandbox,
// named when asked.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Daytona } from '@daytonaio/sdk';
import { startDaemon } from './daemon.mjs';

let d;
let daytona;
const suite = randomBytes(4).toString('hex');

before(async () => {
  d = await startDaemon();
  daytona = new Daytona({ apiUrl: d.apiUrl, apiKey: d.token });
});

after(async () => {
  try {
    if (daytona && Symbol.asyncDispose) await daytona[Symbol.asyncDispose]();
  } finally {
    if (d) {
      if (process.env.SANDPIT_LOG_ON_FAIL && process.exitCode) process.stderr.write(d.logs.join(''));
      await d.stop();
    }
  }
});

async function run(sb, cmd) {
  const res = await sb.process.executeCommand(cmd);
  assert.equal(res.exitCode, 0, `${cmd}: ${res.result}`);
  return res.result.trim();
}

test('sandbox.createSnapshot, then create({snapshot}) has the files', async () => {
  const src = await daytona.create();
  await run(src, 'sh -c "echo kept > /tmp/state.txt"');
  const name = `fromsb-${suite}`;
  await src.createSnapshot(name);
  assert.equal(src.state, 'started');
  const snap = await daytona.snapshot.get(name);
  assert.equal(snap.name, name);
  assert.equal(snap.state, 'active');
  const listed = await daytona.snapshot.list();
  assert.ok(listed.items.some((s) => s.name === name), 'the snapshot is listed');
  const copy = await daytona.create({ snapshot: name });
  assert.equal(await run(copy, 'cat /tmp/state.txt'), 'kept');
  await copy.delete();
  await daytona.snapshot.delete(snap);
  await src.delete();
});

test('sandbox.fork copies the files and diverges', async () => {
  const parent = await daytona.create({ labels: { suite } });
  await run(parent, 'sh -c "echo parent > /tmp/p.txt"');
  const forkName = `fork-${suite}`;
  const forked = await parent.fork({ name: forkName });
  assert.notEqual(forked.id, parent.id);
  assert.equal(forked.name, forkName);
  assert.equal(forked.state, 'started');
  assert.equal(forked.labels.suite, suite);
  assert.equal(await run(forked, 'cat /tmp/p.txt'), 'parent');
  await run(forked, 'sh -c "echo fork > /tmp/own.txt"');
  const res = await parent.process.executeCommand('cat /tmp/own.txt');
  assert.notEqual(res.exitCode, 0, 'a write in the fork shows in the parent');
  const other = await parent.fork();
  assert.notEqual(other.id, forked.id);
  assert.equal(await run(other, 'cat /tmp/p.txt'), 'parent');
  for (const sb of [forked, other, parent]) await sb.delete();
});
