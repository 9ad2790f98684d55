// Daytona's creates honour Idempotency-Key like every other wire of the
// daemon (docs/idempotency.md): a storm of creates under one key makes one
// sandbox, replays say so, two keys with one body make two, and a key reused
// with another body is 422 in Daytona's error shape. The storm goes through
// the official SDK, unmodified: it takes no per-call headers, so the key
// rides on the headers of its API configuration, which every call it makes
// carries.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { Daytona } from '@daytonaio/sdk';
import { startDaemon, containersWithLabel, testImage } from './daemon.mjs';

let d; // the daemon
let daytona; // an SDK client without a key
const suite = randomBytes(4).toString('hex');
const clients = [];

before(async () => {
  d = await startDaemon();
  daytona = new Daytona({ apiUrl: d.apiUrl, apiKey: d.token });
  clients.push(daytona);
});

after(async () => {
  try {
    for (const c of clients) if (Symbol.asyncDispose) await c[Symbol.asyncDispose]();
  } finally {
    if (d) {
      if (process.env.SANDPIT_LOG_ON_FAIL && process.exitCode) process.stderr.write(d.logs.join(''));
      await d.stop();
    }
  }
});

// keyedClient is an SDK client whose every request carries key.
function keyedClient(key) {
  const c = new Daytona({ apiUrl: d.apiUrl, apiKey: d.token });
  c['clientConfig'].baseOptions.headers['Idempotency-Key'] = key;
  clients.push(c);
  return c;
}

// post sends a raw JSON POST to the facade with the key.
async function post(path, body, key) {
  const headers = { Authorization: `Bearer ${d.token}`, 'Content-Type': 'application/json' };
  if (key !== undefined) headers['Idempotency-Key'] = key;
  const res = await fetch(`${d.apiUrl}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: res.status, replayed: res.headers.get('idempotent-replayed'), body: await res.json() };
}

// sandboxesLabelled counts the sandboxes of a label, in the engine and as
// the SDK lists them.
async function sandboxesLabelled(value) {
  const ids = new Set();
  for await (const sb of daytona.list({ labels: { job: value } })) ids.add(sb.id);
  const engine = containersWithLabel(d.runLabel).filter((c) => ids.has(c.sandboxId));
  return { listed: ids.size, containers: engine.length };
}

test('30 concurrent SDK creates under one Idempotency-Key make one sandbox', async () => {
  const job = `storm-${suite}`;
  const c = keyedClient(randomUUID());
  const results = await Promise.all(Array.from({ length: 30 }, () => c.create({ labels: { job } }, { timeout: 120 })));
  const ids = new Set(results.map((sb) => sb.id));
  assert.equal(ids.size, 1, `one sandbox for one key, got ${[...ids].join(', ')}`);
  assert.deepEqual(await sandboxesLabelled(job), { listed: 1, containers: 1 });
  await daytona.delete(results[0]);
});

test('a keyed replay says so; two keys with one body make two; a reused key with another body is 422', async () => {
  const job = `keys-${suite}`;
  const body = { labels: { job } };
  const k1 = randomUUID();
  const first = await post('/sandbox', body, k1);
  assert.equal(first.status, 200, JSON.stringify(first.body));
  assert.equal(first.replayed, null, 'the first answer is not a replay');
  const again = await post('/sandbox', body, k1);
  assert.equal(again.status, 200);
  assert.equal(again.replayed, 'true', 'a replay carries Idempotent-Replayed: true');
  assert.equal(again.body.id, first.body.id);

  const second = await post('/sandbox', body, randomUUID());
  assert.equal(second.status, 200);
  assert.notEqual(second.body.id, first.body.id, 'another key is another sandbox');
  assert.deepEqual(await sandboxesLabelled(job), { listed: 2, containers: 2 });

  const reused = await post('/sandbox', { labels: { job: `${job}-other` } }, k1);
  assert.equal(reused.status, 422);
  assert.equal(reused.body.statusCode, 422, 'Daytona\'s error shape');
  assert.equal(reused.body.error, 'Unprocessable Entity');
  assert.match(reused.body.message, /already used for a different request/);
  assert.equal(reused.body.path, '/daytona/sandbox');

  const malformed = await post('/sandbox', body, 'k'.repeat(256));
  assert.equal(malformed.status, 400);
  assert.equal(malformed.body.statusCode, 400);
  assert.match(malformed.body.message, /Idempotency-Key/);
  assert.deepEqual(await sandboxesLabelled(job), { listed: 2, containers: 2 }, 'neither refusal made a sandbox');
  await daytona.delete(await daytona.get(first.body.id));
  await daytona.delete(await daytona.get(second.body.id));
});

test('snapshot and volume creates replay under their key', async () => {
  const key = randomUUID();
  const name = `snap-${suite}`;
  const first = await post('/snapshots', { name, imageName: testImage }, key);
  assert.equal(first.status, 200, JSON.stringify(first.body));
  const again = await post('/snapshots', { name, imageName: testImage }, key);
  assert.equal(again.status, 200, 'a keyed retry of a snapshot create replays rather than finding its name taken');
  assert.equal(again.replayed, 'true');
  assert.equal(again.body.id, first.body.id);
  const other = await post('/snapshots', { name: `${name}-b`, imageName: testImage }, key);
  assert.equal(other.status, 422);
  assert.equal(other.body.statusCode, 422);
  const unkeyed = await post('/snapshots', { name, imageName: testImage });
  assert.equal(unkeyed.replayed, null, 'a request without a key is never a replay');

  const vkey = randomUUID();
  const vol = await post('/volumes', { name: `vol-${suite}` }, vkey);
  assert.equal(vol.status, 200, JSON.stringify(vol.body));
  const volAgain = await post('/volumes', { name: `vol-${suite}` }, vkey);
  assert.equal(volAgain.replayed, 'true');
  assert.equal(volAgain.body.id, vol.body.id);
  assert.equal((await post('/volumes', { name: `vol2-${suite}` }, vkey)).status, 422);
  assert.equal((await daytona.volume.list()).filter((v) => v.name.startsWith('vol')).length, 1, 'the refused create made no volume');
});
