// The official `e2b` SDK against a three-node sandpit cluster: identical
// creates split over the three nodes' E2B_API_URLs make one sandbox, because
// every node sends them to the one owner whose claim decides them.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { mkdtemp, writeFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Sandbox } from 'e2b'
import { setup, teardown, startDaemon, containers, freePort, sleep } from './helpers.mjs'

const T = 180_000

let keyDir
let nodes = []
const token = `tok-cluster-${randomBytes(8).toString('hex')}`

before(async () => {
  await setup()
  keyDir = await mkdtemp(join(tmpdir(), 'sandpit-cluster-key-'))
  const keyFile = join(keyDir, 'cluster.key')
  await writeFile(keyFile, randomBytes(32).toString('base64') + '\n', { mode: 0o600 })
  let firstGossip
  for (const name of ['c1', 'c2', 'c3']) {
    const gossip = `127.0.0.1:${await freePort()}`
    const raft = `127.0.0.1:${await freePort()}`
    const args = ['--cluster', '--node-name', name, '--gossip-listen', gossip, '--raft-listen', raft,
      '--cluster-key-file', keyFile, '--bootstrap-expect', '3', '--token', token]
    if (firstGossip) args.push('--join', firstGossip)
    else firstGossip = gossip
    nodes.push(await startDaemon({ name, args, env: { SANDPIT_TEST_CLUSTER_FAST: '1' } }))
  }
  // Wait until every node sees three voters and one leader.
  const deadline = Date.now() + 60_000
  for (;;) {
    let formed = true
    for (const n of nodes) {
      try {
        const res = await fetch(`http://127.0.0.1:${n.apiPort}/v1/cluster/members`, { headers: { Authorization: `Bearer ${token}` } })
        const { members } = await res.json()
        const voters = members.filter((m) => m.voter && m.state === 'alive').length
        const leaders = members.filter((m) => m.leader).length
        if (voters !== 3 || leaders !== 1) formed = false
      } catch {
        formed = false
      }
    }
    if (formed) break
    if (Date.now() > deadline) throw new Error('the cluster did not form:\n' + nodes.map((n) => n.log).join('\n'))
    await sleep(200)
  }
})

after(async () => {
  await teardown()
  if (keyDir) await rm(keyDir, { recursive: true, force: true })
})

test('twelve identical creates over three nodes make one sandbox', { timeout: T }, async () => {
  const metadata = { storm: randomBytes(6).toString('hex') }
  const made = await Promise.all(Array.from({ length: 12 }, (_, i) => {
    const n = nodes[i % nodes.length]
    return Sandbox.create({ apiKey: token, apiUrl: n.apiUrl, sandboxUrl: n.sandboxUrl, metadata })
  }))
  const ids = new Set(made.map((s) => s.sandboxId))
  assert.equal(ids.size, 1, `sandbox ids: ${[...ids].join(', ')}`)
  let total = 0
  for (const n of nodes) total += (await containers(n.name)).length
  assert.equal(total, 1, 'containers across the cluster')
})
