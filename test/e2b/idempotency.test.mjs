// E2B's Idempotency-Key against a real daemon (docs/idempotency.md). The
// SDK's own option (Sandbox.create({ idempotencyKey })) arrived in e2b 2.61;
// the version this suite pins predates it, so the keyed requests are raw
// HTTP with the header the SDK sends, and what they made is read back
// through the SDK and the engine:
//   - a 30-way storm of keyed creates makes one sandbox, and every answer but
//     the first says Idempotent-Replayed: true;
//   - two keys with one body make two; a key reused with another body is 422
//     in E2B's shape; a key outside E2B's syntax is 400 and makes nothing;
//   - identical creates without a key are merged (the fingerprint replay)
//     and say so too, unless their metadata differs;
//   - snapshots, forks, network updates and volume creates honour the key.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes, randomUUID } from 'node:crypto'
import { Sandbox } from 'e2b'
import { setup, teardown, startDaemon, containers, sleep } from './helpers.mjs'

const T = 180_000
let d

before(async () => {
  await setup()
  d = await startDaemon({ name: 'idem' })
})

after(teardown)

// call sends a raw request to the E2B API, with the key when one is given.
async function call(method, path, body, key) {
  const headers = { 'X-API-KEY': d.token, 'Content-Type': 'application/json' }
  if (key !== undefined) headers['Idempotency-Key'] = key
  const res = await fetch(`${d.apiUrl}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await res.text()
  return { status: res.status, replayed: res.headers.get('idempotent-replayed'), body: text ? JSON.parse(text) : null }
}

// labelled lists the sandboxes whose metadata has run=value, as the SDK
// lists them, and checks that the engine has one container for each.
async function labelled(value) {
  const out = []
  const p = Sandbox.list({ ...d.opts, query: { metadata: { run: value } } })
  while (p.hasNext) out.push(...(await p.nextItems()))
  const engine = await containers('idem')
  assert.equal(engine.length >= out.length, true)
  return out.map((s) => s.sandboxId).sort()
}

const key = () => randomUUID() // lowercase hex and hyphens: E2B's syntax

describe('E2B Idempotency-Key', () => {
  test('a 30-way storm of keyed creates makes one sandbox; the replays say so', { timeout: T }, async () => {
    const run = `storm-${randomBytes(3).toString('hex')}`
    const k = key()
    const answers = await Promise.all(Array.from({ length: 30 }, () =>
      call('POST', '/sandboxes', { templateID: 'base', metadata: { run } }, k)))
    for (const a of answers) assert.equal(a.status, 201, JSON.stringify(a.body))
    const ids = new Set(answers.map((a) => a.body.sandboxID))
    assert.equal(ids.size, 1, `one sandbox for one key, got ${[...ids]}`)
    assert.equal(answers.filter((a) => a.replayed === 'true').length, 29, 'every answer but the first is a replay')
    assert.deepEqual(await labelled(run), [...ids])
    await Sandbox.kill([...ids][0], d.opts)
  })

  test('two keys with one body make two; a reused key with another body is 422; a malformed key is 400', { timeout: T }, async () => {
    const run = `keys-${randomBytes(3).toString('hex')}`
    const body = { templateID: 'base', metadata: { run } }
    const k1 = key()
    const a = await call('POST', '/sandboxes', body, k1)
    const b = await call('POST', '/sandboxes', body, key())
    assert.equal(a.status, 201)
    assert.equal(b.status, 201)
    assert.notEqual(a.body.sandboxID, b.body.sandboxID)
    assert.equal(a.replayed, null)
    assert.equal(b.replayed, null, 'another key is another create, not a fingerprint merge')

    const reused = await call('POST', '/sandboxes', { templateID: 'base', metadata: { run: `${run}-other` } }, k1)
    assert.equal(reused.status, 422)
    assert.equal(reused.body.code, 422, "E2B's error shape")
    assert.match(reused.body.message, /Idempotency-Key/)

    for (const bad of ['Upper-Case', 'under_score', 'k'.repeat(256), 'spa ce']) {
      const res = await call('POST', '/sandboxes', { templateID: 'base', metadata: { run } }, bad)
      assert.equal(res.status, 400, bad)
      assert.equal(res.body.code, 400)
      assert.match(res.body.message, /lowercase ASCII letters, digits or hyphens/)
    }
    assert.deepEqual(await labelled(run), [a.body.sandboxID, b.body.sandboxID].sort(), 'the refusals made nothing')
    await Sandbox.kill(a.body.sandboxID, d.opts)
    await Sandbox.kill(b.body.sandboxID, d.opts)
  })

  test('identical creates without a key are merged and say so; distinct metadata makes twins', { timeout: T }, async () => {
    const run = `merge-${randomBytes(3).toString('hex')}`
    const body = { templateID: 'base', metadata: { run } }
    const first = await call('POST', '/sandboxes', body)
    const second = await call('POST', '/sandboxes', body)
    assert.equal(second.body.sandboxID, first.body.sandboxID, 'the fingerprint replay merged them')
    assert.equal(first.replayed, null)
    assert.equal(second.replayed, 'true', 'a fingerprint merge says so')
    // The daemon logs the merge before it answers, but its stderr reaches
    // this process on its own schedule: wait for the line, then check it.
    const merged = /merged an identical create.*window=/
    for (let i = 0; i < 300 && !merged.test(d.log); i++) await sleep(100)
    assert.match(d.log, merged)
    const twin = await call('POST', '/sandboxes', { templateID: 'base', metadata: { run, worker: '2' } })
    assert.notEqual(twin.body.sandboxID, first.body.sandboxID, 'distinct metadata makes a twin')
    assert.equal(twin.replayed, null)
    await Sandbox.kill(first.body.sandboxID, d.opts)
    await Sandbox.kill(twin.body.sandboxID, d.opts)
  })

  test('snapshots, forks, network updates and volume creates honour the key', { timeout: T }, async () => {
    const src = await Sandbox.create(d.opts)
    const id = src.sandboxId

    const sk = key()
    const snap = await call('POST', `/sandboxes/${id}/snapshots`, {}, sk)
    assert.equal(snap.status, 201, JSON.stringify(snap.body))
    const snapAgain = await call('POST', `/sandboxes/${id}/snapshots`, {}, sk)
    assert.equal(snapAgain.replayed, 'true')
    assert.equal(snapAgain.body.snapshotID, snap.body.snapshotID, 'one snapshot for one key')
    const bySandbox = Sandbox.listSnapshots({ ...d.opts, sandboxId: id })
    assert.equal((await bySandbox.nextItems()).length, 1)
    assert.equal((await call('POST', `/sandboxes/${id}/snapshots`, {}, 'Bad_Key')).status, 400)

    const fk = key()
    const forks = await Promise.all(Array.from({ length: 5 }, () => call('POST', `/sandboxes/${id}/fork`, { count: 1, timeout: 120 }, fk)))
    const forkIds = new Set(forks.map((f) => f.body[0].sandbox.sandboxID))
    assert.equal(forkIds.size, 1, 'five keyed forks make one copy')
    assert.equal(forks.filter((f) => f.replayed === 'true').length, 4)

    const nk = key()
    const net = await call('PUT', `/sandboxes/${id}/network`, { allowOut: ['198.51.100.7'] }, nk)
    assert.ok(net.status < 300, JSON.stringify(net.body))
    assert.equal((await call('PUT', `/sandboxes/${id}/network`, { allowOut: ['198.51.100.7'] }, nk)).replayed, 'true')
    assert.equal((await call('PUT', `/sandboxes/${id}/network`, { allowOut: ['198.51.100.8'] }, nk)).status, 422)

    const vk = key()
    const vname = `vol-${randomBytes(3).toString('hex')}`
    const vol = await call('POST', '/volumes', { name: vname }, vk)
    assert.ok(vol.status < 300, JSON.stringify(vol.body))
    const volAgain = await call('POST', '/volumes', { name: vname }, vk)
    assert.equal(volAgain.replayed, 'true')
    assert.equal(volAgain.body.volumeID, vol.body.volumeID)
    assert.equal((await call('POST', '/volumes', { name: `${vname}-b` }, vk)).status, 422)

    for (const f of forkIds) await Sandbox.kill(f, d.opts)
    await src.kill()
  })
})
