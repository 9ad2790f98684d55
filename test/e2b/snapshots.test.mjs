// Snapshots and forks through the official e2b SDK: a file written in a
// sandbox is in both sandboxes created from its snapshot; snapshots list
// (all, by sandbox, by name) and delete (refused while a sandbox runs from
// one); fork() and fork({ count: 3 }) copy the parent's files, keep the
// parent running and diverge; a fork of a killed parent is SandboxNotFound,
// and a count below 1 is refused. Two fork() calls make two sets of copies.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { randomBytes } from 'node:crypto'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { setup, teardown, startDaemon, runId } from './helpers.mjs'

const run = promisify(execFile)
const T = 180_000
const uniq = (p) => `${p}-${randomBytes(3).toString('hex')}`

let d

before(async () => {
  await setup()
  d = await startDaemon({ name: 'snapshots' })
})

after(async () => {
  await teardown()
  const { stdout } = await run('docker', ['images', '-q', '--no-trunc', '--filter', `label=sandpit.run=${runId}`])
  const ids = [...new Set(stdout.split('\n').filter(Boolean))]
  if (ids.length > 0) await run('docker', ['rmi', '-f', ...ids]).catch(() => {})
})

async function listAll(opts) {
  const out = []
  const p = Sandbox.listSnapshots({ ...d.opts, ...opts })
  while (p.hasNext) out.push(...(await p.nextItems()))
  return out
}

describe('snapshots', () => {
  test('createSnapshot, create from it twice, list, delete', { timeout: T }, async () => {
    const src = await Sandbox.create(d.opts)
    await src.files.write('/home/user/state.txt', 'from the source')
    const name = uniq('snap')
    const snap = await src.createSnapshot({ name, ...d.opts })
    assert.equal(snap.snapshotId, `${name}:default`)
    assert.deepEqual(snap.names, [`${name}:default`])
    const anon = await Sandbox.createSnapshot(src.sandboxId, d.opts)
    assert.match(anon.snapshotId, /:default$/)
    assert.deepEqual(anon.names, [])

    const a = await Sandbox.create(snap.snapshotId, d.opts)
    const b = await Sandbox.create(anon.snapshotId, d.opts)
    for (const s of [a, b]) {
      assert.equal(await s.files.read('/home/user/state.txt'), 'from the source')
    }
    await a.files.write('/home/user/state.txt', 'changed in a')
    assert.equal(await b.files.read('/home/user/state.txt'), 'from the source')

    const all = (await listAll({})).map((s) => s.snapshotId).sort()
    assert.deepEqual(all, [snap.snapshotId, anon.snapshotId].sort())
    const bySandbox = await listAll({ sandboxId: src.sandboxId })
    assert.equal(bySandbox.length, 2)
    assert.deepEqual((await listAll({ sandboxId: a.sandboxId })), [])
    const byName = await listAll({ name })
    assert.deepEqual(byName.map((s) => s.snapshotId), [snap.snapshotId])
    const paged = Sandbox.listSnapshots({ ...d.opts, limit: 1 })
    assert.equal((await paged.nextItems()).length, 1)
    assert.equal(paged.hasNext, true)
    assert.equal((await paged.nextItems()).length, 1)
    assert.equal(paged.hasNext, false)

    // A sandbox runs from it: the delete is refused until it is gone.
    await assert.rejects(Sandbox.deleteSnapshot(snap.snapshotId, d.opts), /in use|runs from/)
    await a.kill()
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, d.opts), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, d.opts), false)
    assert.deepEqual((await listAll({ name })), [])
    await b.kill()
    assert.equal(await Sandbox.deleteSnapshot(anon.snapshotId, d.opts), true)
    await src.kill()
  })
})

describe('forks', () => {
  test('fork() and fork({ count: 3 }) copy the files and diverge', { timeout: T }, async () => {
    const parent = await Sandbox.create({ ...d.opts, timeoutMs: 120_000 })
    await parent.files.write('/home/user/parent.txt', 'parent')
    const [one] = await parent.fork({ ...d.opts, timeoutMs: 60_000 })
    assert.ok(one instanceof Sandbox, String(one))
    assert.notEqual(one.sandboxId, parent.sandboxId)
    assert.equal(await one.files.read('/home/user/parent.txt'), 'parent')

    const three = await Sandbox.fork(parent.sandboxId, { ...d.opts, count: 3, timeoutMs: 60_000 })
    assert.equal(three.length, 3)
    const ids = new Set([parent.sandboxId, one.sandboxId])
    for (const [i, f] of three.entries()) {
      assert.ok(f instanceof Sandbox, String(f))
      assert.ok(!ids.has(f.sandboxId), 'a fork reused a sandbox id')
      ids.add(f.sandboxId)
      assert.equal(await f.files.read('/home/user/parent.txt'), 'parent')
      await f.files.write('/home/user/own.txt', `fork ${i}`)
    }
    for (const [i, f] of three.entries()) {
      assert.equal(await f.files.read('/home/user/own.txt'), `fork ${i}`)
    }
    assert.equal(await parent.files.exists('/home/user/own.txt'), false)
    assert.equal(await parent.isRunning(), true)
    const r = await three[0].commands.run('whoami')
    assert.equal(r.stdout.trim(), 'user')
    for (const f of [one, ...three]) await f.kill()
    await parent.kill()
  })

  test('a killed parent and a bad count', { timeout: T }, async () => {
    const parent = await Sandbox.create(d.opts)
    // A 400: e2b 2.51 raises SandboxError with statusCode 400 for a refused
    // control-plane call (its InvalidArgumentError is for envd's 400s).
    await assert.rejects(parent.fork({ ...d.opts, count: 0 }), (e) => e.statusCode === 400 && !(e instanceof SandboxNotFoundError) && /count/.test(e.message))
    await parent.kill()
    await assert.rejects(parent.fork(d.opts), SandboxNotFoundError)
  })
})
