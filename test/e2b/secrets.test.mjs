// E2B secrets through the official e2b SDK: Secret.create, list, getInfo,
// exists, update and destroy against a real daemon. Values are write-only:
// no answer (the SDK's objects, the raw bodies of the reads) and no line of
// the daemon's log holds one. One owner's secrets are not another's.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Secret } from 'e2b'
import { setup, teardown, startDaemon, adminCall } from './helpers.mjs'

let d
const uniq = (p) => `${p}-${randomBytes(3).toString('hex')}`
const value = () => `sv-${randomBytes(16).toString('hex')}`

before(async () => {
  await setup()
  d = await startDaemon({ name: 'secrets' })
})

after(async () => {
  if (d) await d.stop()
  await teardown()
})

// raw reads an E2B path with the SDK's key and returns its status and body
// text, so that the test sees every byte of an answer, not only the fields
// the SDK keeps.
async function raw(opts, path) {
  const res = await fetch(`${opts.apiUrl}${path}`, { headers: { 'X-API-KEY': opts.apiKey } })
  return { status: res.status, text: await res.text(), next: res.headers.get('x-next-token') }
}

test('Secret.create, list, getInfo, update and destroy; values never come back', async () => {
  const name = uniq('api-key')
  const v1 = value()
  const v2 = value()
  const seen = []

  const created = await Secret.create(name, v1, { ...d.opts, metadata: { team: 'ml' } })
  seen.push(JSON.stringify(created))
  assert.equal(created.name, name)
  assert.match(created.secretId, /^sec_/)
  assert.equal(created.version, 1)
  assert.deepEqual(created.metadata, { team: 'ml' })
  assert.ok(created.createdAt instanceof Date && !Number.isNaN(created.createdAt.getTime()))

  const again = await Secret.create(name, v1, { ...d.opts, metadata: { team: 'ml' } })
  assert.equal(again.secretId, created.secretId, 'a retried create returns the same secret')
  await assert.rejects(Secret.create(name, v2, d.opts), /exists|conflict/i, 'the name with another value is refused')

  const pager = Secret.list(d.opts)
  const listed = []
  while (pager.hasNext) listed.push(...(await pager.nextItems()))
  seen.push(JSON.stringify(listed))
  const mine = listed.find((s) => s.secretId === created.secretId)
  assert.ok(mine, 'the list holds the secret')
  assert.deepEqual(Object.keys(mine).sort(), ['createdAt', 'metadata', 'name', 'secretId', 'updatedAt', 'version'])

  const info = await Secret.getInfo(name, d.opts)
  seen.push(JSON.stringify(info))
  assert.equal(info.secretId, created.secretId)
  assert.equal(await Secret.exists(created.secretId, d.opts), true)

  const updated = await Secret.update(created.secretId, v2, d.opts)
  seen.push(JSON.stringify(updated))
  assert.equal(updated.version, 2)
  assert.deepEqual(updated.metadata, { team: 'ml' }, 'an update without metadata keeps it')

  for (const path of ['/secrets', `/secrets/${created.secretId}`, `/secrets/${name}`]) {
    const r = await raw(d.opts, path)
    assert.equal(r.status, 200, `${path}: ${r.text}`)
    seen.push(r.text)
  }
  for (const v of [v1, v2]) {
    for (const s of seen) assert.ok(!s.includes(v), `an answer holds the value: ${s}`)
    assert.ok(!d.log.includes(v), 'the daemon log holds the value')
  }

  assert.equal(await Secret.destroy(name, d.opts), true)
  assert.equal(await Secret.destroy(name, d.opts), false)
  assert.equal(await Secret.exists(name, d.opts), false)
  await assert.rejects(Secret.getInfo(created.secretId, d.opts), /not found/)
  await assert.rejects(Secret.update(created.secretId, v1, d.opts), /not found/)
})

test('Secret.list pages with limit and X-Next-Token', async () => {
  const names = [uniq('page-a'), uniq('page-b'), uniq('page-c')]
  for (const n of names) await Secret.create(n, value(), d.opts)
  const pager = Secret.list({ ...d.opts, limit: 2 })
  const pages = []
  while (pager.hasNext) pages.push(await pager.nextItems())
  assert.ok(pages.length >= 2, 'a limit of 2 over 3 secrets gives more than one page')
  assert.ok(pages.every((p) => p.length <= 2))
  const all = pages.flat().map((s) => s.name)
  for (const n of names) assert.equal(all.filter((x) => x === n).length, 1, `${n} is listed once`)
  for (const n of names) await Secret.destroy(n, d.opts)
})

test('another owner neither sees nor destroys a secret', async () => {
  const tokenFor = async (owner) => {
    const t = await adminCall(d, 'POST', '/v1/tokens', { name: uniq(owner), owner })
    return { ...d.opts, apiKey: t.token }
  }
  const A = await tokenFor('alice')
  const B = await tokenFor('bob')
  const name = uniq('owned')
  const s = await Secret.create(name, value(), A)
  const pager = Secret.list(B)
  const listed = []
  while (pager.hasNext) listed.push(...(await pager.nextItems()))
  assert.ok(!listed.some((x) => x.secretId === s.secretId))
  assert.equal(await Secret.exists(s.secretId, B), false)
  assert.equal(await Secret.destroy(s.secretId, B), false)
  assert.equal(await Secret.exists(s.secretId, A), true)
  await Secret.destroy(s.secretId, A)
})
