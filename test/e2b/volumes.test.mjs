// E2B volumes through the official e2b SDK: Volume.create (a retried create
// of one name returns the same volume), list, getInfo, connect, destroy; a
// sandbox created with volumeMounts writes a file a second sandbox mounting
// the same volume reads; getInfo shows the mounts; a mounted volume is not
// destroyed.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Sandbox, Volume } from 'e2b'
import { setup, teardown, startDaemon } from './helpers.mjs'

let d
const uniq = (p) => `${p}-${randomBytes(3).toString('hex')}`

before(async () => {
  await setup()
  d = await startDaemon({ name: 'volumes' })
})

after(async () => {
  if (d) await d.stop()
  await teardown()
})

test('Volume.create, list, getInfo, connect and destroy', async () => {
  const name = uniq('vol')
  const vol = await Volume.create(name, d.opts)
  assert.equal(vol.name, name)
  assert.match(vol.volumeId, /^vol/)
  const again = await Volume.create(name, d.opts)
  assert.equal(again.volumeId, vol.volumeId, 'a retried create returns the same volume')
  const list = await Volume.list(d.opts)
  assert.ok(list.some((v) => v.volumeId === vol.volumeId && v.name === name))
  const info = await Volume.getInfo(vol.volumeId, d.opts)
  assert.equal(info.name, name)
  const conn = await Volume.connect(vol.volumeId, d.opts)
  assert.equal(conn.name, name)
  assert.equal(await Volume.destroy(vol.volumeId, d.opts), true)
  assert.equal(await Volume.destroy(vol.volumeId, d.opts), false)
  await assert.rejects(Volume.getInfo(vol.volumeId, d.opts), /not found/)
})

test('volumeMounts: one sandbox writes, another reads; a mounted volume is not destroyed', async () => {
  const vol = await Volume.create(uniq('shared'), d.opts)
  const a = await Sandbox.create({ ...d.opts, volumeMounts: { '/data': vol } })
  let b
  try {
    // A fresh volume's root belongs to root, as on E2B's own engine.
    const w = await a.commands.run('echo from-a > /data/note', { user: 'root' })
    assert.equal(w.exitCode, 0)
    b = await Sandbox.create({ ...d.opts, volumeMounts: { '/mnt/v': vol.name } })
    const r = await b.commands.run('cat /mnt/v/note')
    assert.equal(r.stdout, 'from-a\n')
    const info = await Sandbox.getInfo(b.sandboxId, d.opts)
    assert.deepEqual(info.volumeMounts, [{ name: vol.name, path: '/mnt/v' }])
    await assert.rejects(Volume.destroy(vol.volumeId, d.opts), /mounted|in use/)
  } finally {
    await a.kill()
    if (b) await b.kill()
  }
  assert.equal(await Volume.destroy(vol.volumeId, d.opts), true)
})
