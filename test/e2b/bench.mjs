// Time-to-interactive through the official e2b SDK: from Sandbox.create until
// the first commands.run returns, over N sandboxes (default 30, env BENCH_N)
// made one after another against a fresh daemon on the local Docker engine.
//
//   node bench.mjs
//
// Each create carries its own metadata: identical bodies within the replay
// window would be deduplicated into one sandbox, which would measure a replay
// rather than a create. Sandboxes are killed after their sample, outside the
// timed section.

import { Sandbox } from 'e2b'
import { setup, teardown, startDaemon } from './helpers.mjs'

const n = Number(process.env.BENCH_N || 30)

function percentile(sorted, p) {
  // Nearest rank: the smallest sample with at least p of the samples at or
  // below it.
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)]
}

const fmt = (ms) => `${ms.toFixed(0)} ms`

async function main() {
  await setup()
  try {
    const d = await startDaemon({ name: 'bench' })
    const tti = []
    const createOnly = []
    // One unmeasured warm-up, so the first sample does not pay for cold
    // caches (image layers, the daemon's first connections).
    await (await Sandbox.create({ ...d.opts, metadata: { bench: 'warmup' } })).kill()
    for (let i = 0; i < n; i++) {
      const t0 = performance.now()
      const sbx = await Sandbox.create({ ...d.opts, metadata: { bench: String(i) } })
      const t1 = performance.now()
      const r = await sbx.commands.run('echo ready')
      const t2 = performance.now()
      if (r.stdout !== 'ready\n') throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`)
      createOnly.push(t1 - t0)
      tti.push(t2 - t0)
      await sbx.kill()
    }
    const report = (name, xs) => {
      const s = [...xs].sort((a, b) => a - b)
      const mean = s.reduce((a, b) => a + b, 0) / s.length
      console.log(`${name.padEnd(28)} p50 ${fmt(percentile(s, 0.5))}  p95 ${fmt(percentile(s, 0.95))}  min ${fmt(s[0])}  max ${fmt(s.at(-1))}  mean ${fmt(mean)}`)
    }
    console.log(`sandboxes: ${n} (sequential), image ${process.env.SANDPIT_TEST_IMAGE || 'sandpit/base:test'}`)
    report('time-to-interactive', tti)
    report('  of which Sandbox.create', createOnly)
  } finally {
    await teardown()
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
