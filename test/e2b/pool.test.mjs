// The warm pool through the official e2b SDK: a create that adopts a pooled
// sandbox answers with the sandbox's own environment in place.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { setup, teardown, startDaemon, runId, poolStatus, awaitPool } from './helpers.mjs'

let d

before(async () => {
  await setup()
  // E2B sandboxes act as "user", so that is the pool's user too.
  d = await startDaemon({ name: 'pool', args: ['--warm-pool', 'base=2,user=user'] })
})

after(async () => {
  await teardown()
})

test('a create that adopts a pooled sandbox runs commands with its env', { timeout: 120_000 }, async () => {
  await awaitPool(d, 2)
  const sbx = await Sandbox.create({ ...d.opts, envs: { POOL_VAR: 'from-the-create' }, metadata: { run: runId, t: 'pool' } })
  try {
    const st = await poolStatus(d)
    assert.equal(st.hits, 1, 'the create adopted a pooled sandbox')
    const r = await sbx.commands.run('echo "$POOL_VAR"')
    assert.equal(r.stdout, 'from-the-create\n')
    const info = await sbx.getInfo()
    assert.equal(info.metadata.t, 'pool')
  } finally {
    await sbx.kill()
  }
})

test('an E2B create answers with a Server-Timing header', { timeout: 120_000 }, async () => {
  await awaitPool(d, 2)
  const res = await fetch(`${d.apiUrl}/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-KEY': d.token, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', metadata: { run: runId, t: 'timing' } }),
  })
  assert.equal(res.status, 201)
  const timing = res.headers.get('server-timing')
  assert.match(timing, /store;dur=[\d.]+/)
  assert.match(timing, /agent;dur=[\d.]+/)
  assert.match(timing, /total;dur=[\d.]+/)
  assert.match(timing, /desc=warm/)
  const { sandboxID } = await res.json()
  await Sandbox.kill(sandboxID, d.opts)
})
