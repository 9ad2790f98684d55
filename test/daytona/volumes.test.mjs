// Daytona volumes through the official SDK, unmodified, against a real
// daemon and the real engine: volume.create/list/get/get(name, true)/delete,
// a file one sandbox writes to a mounted volume read by a second sandbox,
// and the delete of a mounted volume refused.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Daytona, DaytonaNotFoundError } from '@daytonaio/sdk';
import { startDaemon, testImage } from './daemon.mjs';

let d; // the daemon
let daytona; // the SDK client
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

test('volume create, list, get, get(name, true) and delete', async () => {
  const name = `vol-${suite}`;
  const v = await daytona.volume.create(name);
  assert.equal(v.name, name);
  assert.equal(v.state, 'ready');
  assert.match(v.id, /^vol/);
  const again = await daytona.volume.create(name);
  assert.equal(again.id, v.id, 'a retried create returns the same volume');
  const listed = await daytona.volume.list();
  assert.ok(listed.some((x) => x.id === v.id), 'the volume is listed');
  const got = await daytona.volume.get(name);
  assert.equal(got.id, v.id);
  await assert.rejects(daytona.volume.get(`missing-${suite}`), DaytonaNotFoundError);
  const made = await daytona.volume.get(`made-${suite}`, true);
  assert.equal(made.name, `made-${suite}`);
  assert.equal(made.state, 'ready');
  assert.equal((await daytona.volume.get(`made-${suite}`, true)).id, made.id);
  await daytona.volume.delete(made);
  await daytona.volume.delete(v);
  await assert.rejects(daytona.volume.get(name), DaytonaNotFoundError);
});

test('a file written to a mounted volume is read by a second sandbox; a mounted volume is not deleted', async () => {
  const v = await daytona.volume.get(`shared-${suite}`, true);
  const a = await daytona.create({ image: testImage, volumes: [{ volumeId: v.id, mountPath: '/data' }] }, { timeout: 120 });
  let b;
  try {
    await run(a, `echo from-a-${suite} > /data/note`);
    b = await daytona.create({ image: testImage, volumes: [{ volumeId: v.id, mountPath: '/mnt/v' }] }, { timeout: 120 });
    assert.equal(await run(b, 'cat /mnt/v/note'), `from-a-${suite}`);
    await assert.rejects(daytona.volume.delete(v), (err) => /in use/i.test(err.message), 'a mounted volume is not deleted');
    assert.ok((await daytona.volume.list()).some((x) => x.id === v.id), 'the refused delete left the volume');
  } finally {
    await a.delete();
    if (b) await b.delete();
  }
  await daytona.volume.delete(v);
});
