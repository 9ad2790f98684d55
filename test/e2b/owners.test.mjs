// Owners through the official e2b SDK: two personal access tokens of two
// owners on one daemon. Each owner's sandboxes are invisible to the other
// (not found, never forbidden), identical create bodies from the two are two
// sandboxes, and a revoked key is refused at once.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Sandbox, AuthenticationError, SandboxNotFoundError } from 'e2b'
import { setup, teardown, startDaemon, runId, adminCall } from './helpers.mjs'

const T = 120_000

let d
let A
let B

// admin calls the native API with the daemon's admin token.
const admin = (method, path, body) => adminCall(d, method, path, body)

async function tokenFor(name, owner) {
  const t = await admin('POST', '/v1/tokens', { name, owner })
  assert.match(t.token, /^spt_/)
  return { ...d.opts, apiKey: t.token }
}

async function listAll(opts) {
  const paginator = Sandbox.list(opts)
  const out = []
  while (paginator.hasNext) out.push(...(await paginator.nextItems()))
  return out.map((s) => s.sandboxId)
}

const uniq = (tag) => ({ test: `${tag}-${randomBytes(4).toString('hex')}`, run: runId })

before(async () => {
  await setup()
  d = await startDaemon({ name: 'owners' })
  A = await tokenFor('alice-e2b', 'alice')
  B = await tokenFor('bob-e2b', 'bob')
})

after(async () => {
  await teardown()
})

describe('owners', () => {
  test("A's sandbox is not found for B: connect, getInfo, kill, list", async () => {
    const md = uniq('isolation')
    const sbx = await Sandbox.create({ ...A, metadata: md })
    try {
      await assert.rejects(Sandbox.connect(sbx.sandboxId, B), SandboxNotFoundError)
      await assert.rejects(Sandbox.getInfo(sbx.sandboxId, B), SandboxNotFoundError)
      assert.equal(await Sandbox.kill(sbx.sandboxId, B), false, "B killing A's sandbox")
      assert.ok(!(await listAll(B)).includes(sbx.sandboxId), "B's list includes A's sandbox")
      assert.ok(!(await listAll({ ...B, query: { metadata: md } })).includes(sbx.sandboxId))
      assert.deepEqual(await listAll({ ...A, query: { metadata: md } }), [sbx.sandboxId])
      const info = await Sandbox.getInfo(sbx.sandboxId, A)
      assert.equal(info.state, 'running')
      const again = await Sandbox.connect(sbx.sandboxId, A)
      assert.equal((await again.commands.run('echo still mine')).stdout, 'still mine\n')
    } finally {
      await Sandbox.kill(sbx.sandboxId, A)
    }
  })

  test('identical create bodies from A and B within the replay window are two sandboxes', async () => {
    const md = uniq('dedupe')
    const [a, b] = await Promise.all([Sandbox.create({ ...A, metadata: md }), Sandbox.create({ ...B, metadata: md })])
    try {
      assert.notEqual(a.sandboxId, b.sandboxId)
      // Within one owner the retry-safe dedupe still holds.
      const a2 = await Sandbox.create({ ...A, metadata: md })
      assert.equal(a2.sandboxId, a.sandboxId)
      assert.deepEqual(await listAll({ ...B, query: { metadata: md } }), [b.sandboxId])
    } finally {
      await Promise.all([Sandbox.kill(a.sandboxId, A), Sandbox.kill(b.sandboxId, B)])
    }
  })

  test('a revoked key is refused on its next request; other keys are unaffected', async () => {
    const C = await tokenFor('carol-e2b', 'carol')
    await listAll(C)
    await admin('DELETE', '/v1/tokens/carol-e2b')
    await assert.rejects(Sandbox.list(C).nextItems(), AuthenticationError)
    await assert.rejects(Sandbox.create({ ...C, metadata: uniq('revoked') }), AuthenticationError)
    await listAll(A)
  })
})
