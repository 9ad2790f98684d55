// Time-to-interactive through the official e2b SDK: from Sandbox.create until
// the first commands.run returns, over N sandboxes (default 30, env BENCH_N)
// made one after another against fresh daemons on the local Docker engine:
// one without a pool (cold creates) and one with a warm pool of 10 (each
// create adopts a pooled sandbox; between samples, outside the timed
// section, the bench waits until the pool has a ready sandbox again).
//
//   node bench.mjs
//
// Each create carries its own metadata: identical bodies within the replay
// window would be deduplicated into one sandbox, which would measure a replay
// rather than a create. Sandboxes are killed after their sample, outside the
// timed section.

import { Sandbox } from 'e2b'
import { setup, teardown, startDaemon, sleep } from './helpers.mjs'

const n = Number(process.env.BENCH_N || 30)

function percentile(sorted, p) {
  // Nearest rank: the smallest sample with at least p of the samples at or
  // below it.
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)]
}

const fmt = (ms) => `${ms.toFixed(0)} ms`
const fmt1 = (ms) => `${ms.toFixed(1)} ms`

// poolReady waits until the daemon's first pool has a ready sandbox.
async function poolReady(d) {
  for (;;) {
    const res = await fetch(`http://127.0.0.1:${d.apiPort}/v1/pool`, { headers: { Authorization: `Bearer ${d.token}` } })
    const st = await res.json()
    if (st.pools[0].ready >= 1) return st
    await sleep(20)
  }
}

async function measure(name, args) {
  const d = await startDaemon({ name, args })
  const warm = args.length > 0
  const tti = []
  const createOnly = []
  // One unmeasured warm-up, so the first sample does not pay for cold
  // caches (image layers, the daemon's first connections).
  if (warm) await poolReady(d)
  await (await Sandbox.create({ ...d.opts, metadata: { bench: 'warmup' } })).kill()
  for (let i = 0; i < n; i++) {
    if (warm) await poolReady(d)
    const t0 = performance.now()
    const sbx = await Sandbox.create({ ...d.opts, envs: { BENCH: String(i) }, metadata: { bench: String(i) } })
    const t1 = performance.now()
    const r = await sbx.commands.run('echo ready')
    const t2 = performance.now()
    if (r.stdout !== 'ready\n') throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`)
    createOnly.push(t1 - t0)
    tti.push(t2 - t0)
    await sbx.kill()
  }
  if (warm) {
    const res = await fetch(`http://127.0.0.1:${d.apiPort}/v1/pool`, { headers: { Authorization: `Bearer ${d.token}` } })
    const st = await res.json()
    console.log(`${name}: pool hits ${st.hits}, misses ${st.misses}`)
  }
  await d.stop()
  return { tti, createOnly }
}

async function main() {
  await setup()
  try {
    const cold = await measure('bench-cold', [])
    // E2B sandboxes act as "user", so the pool's sandboxes do too.
    const warm = await measure('bench-warm', ['--warm-pool', 'base=10,user=user'])
    const report = (name, xs) => {
      const s = [...xs].sort((a, b) => a - b)
      const mean = s.reduce((a, b) => a + b, 0) / s.length
      const f = s[0] < 100 ? fmt1 : fmt
      console.log(`${name.padEnd(34)} p50 ${f(percentile(s, 0.5))}  p95 ${f(percentile(s, 0.95))}  min ${f(s[0])}  max ${f(s.at(-1))}  mean ${f(mean)}`)
    }
    console.log(`sandboxes: ${n} per mode (sequential), image ${process.env.SANDPIT_TEST_IMAGE || 'sandpit/base:test'}`)
    report('cold time-to-interactive', cold.tti)
    report('  of which Sandbox.create', cold.createOnly)
    report('warm time-to-interactive', warm.tti)
    report('  of which Sandbox.create', warm.createOnly)
  } finally {
    await teardown()
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
