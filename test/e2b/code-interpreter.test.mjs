// The official @e2b/code-interpreter SDK, unmodified, against a real daemon
// and the code-interpreter template (images/code-interpreter, built by
// scripts/build-code-interpreter-image.sh): Sandbox.create() with no
// template, stateful runCode on real Jupyter kernels, streamed output, rich
// results, errors, contexts, timeouts that interrupt, per-call variables,
// and the warm pool.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { join } from 'node:path'
import { Sandbox } from '@e2b/code-interpreter'
import { setup, teardown, startDaemon, runId, repoRoot, awaitPool, poolStatus } from './helpers.mjs'

const run = promisify(execFile)
let d
let pooled
let sbx

// Each create gets its own metadata: E2B creates with one body within the
// replay window are one create.
let n = 0
const meta = (t) => ({ run: runId, t, n: String(++n) })

before(async () => {
  await setup()
  // Cached by its recipe's hash: a no-op once the image is built.
  await run(join(repoRoot, 'scripts', 'build-code-interpreter-image.sh'), [], { maxBuffer: 16 << 20 })
  d = await startDaemon({ name: 'interp' })
  // E2B sandboxes act as "user", so that is the pool's user too.
  pooled = await startDaemon({ name: 'interp-pool', args: ['--warm-pool', 'code-interpreter-v1=1,user=user'] })
  sbx = await Sandbox.create({ ...d.opts, metadata: meta('main') })
})

after(async () => {
  await sbx?.kill().catch(() => {})
  await teardown()
})

test('Sandbox.create() with no template makes a code interpreter sandbox', { timeout: 60_000 }, async () => {
  const info = await sbx.getInfo()
  assert.equal(info.templateId, 'code-interpreter-v1')
})

test('state persists between runCode calls', { timeout: 60_000 }, async () => {
  const first = await sbx.runCode('x = 1')
  assert.equal(first.error, undefined)
  const second = await sbx.runCode('x + 1')
  assert.equal(second.text, '2')
  assert.ok(second.executionCount > first.executionCount, 'the kernel counts executions')
})

test('stdout and stderr stream to the callbacks in order while the code runs', { timeout: 60_000 }, async () => {
  const seen = []
  const started = Date.now()
  const exec = await sbx.runCode(
    'import sys, time\nfor i in range(3):\n    print(f"out {i}", flush=True)\n    print(f"err {i}", file=sys.stderr, flush=True)\n    time.sleep(0.3)',
    {
      onStdout: (m) => seen.push({ at: Date.now() - started, s: 'out', line: m.line }),
      onStderr: (m) => seen.push({ at: Date.now() - started, s: 'err', line: m.line }),
    },
  )
  const outs = seen.filter((e) => e.s === 'out').map((e) => e.line).join('')
  const errs = seen.filter((e) => e.s === 'err').map((e) => e.line).join('')
  assert.equal(outs, 'out 0\nout 1\nout 2\n')
  assert.equal(errs, 'err 0\nerr 1\nerr 2\n')
  assert.deepEqual(exec.logs.stdout.join(''), outs)
  // Streamed: the first line arrived well before the last was printed.
  assert.ok(seen.length >= 4, JSON.stringify(seen))
  assert.ok(seen[seen.length - 1].at - seen[0].at >= 400, `lines arrived together: ${JSON.stringify(seen)}`)
})

test('an exception is an error with its name, value and traceback', { timeout: 60_000 }, async () => {
  const errors = []
  const exec = await sbx.runCode('1/0', { onError: (e) => errors.push(e) })
  assert.equal(exec.error.name, 'ZeroDivisionError')
  assert.match(exec.error.value, /division by zero/)
  assert.match(exec.error.traceback, /ZeroDivisionError/)
  assert.equal(errors.length, 1)
  // The context is still usable.
  assert.equal((await sbx.runCode('x')).text, '1')
})

test('a matplotlib plot comes back as a PNG with its chart', { timeout: 60_000 }, async () => {
  const exec = await sbx.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [2, 4, 8], label="growth")\nplt.title("Growth")\nplt.xlabel("day")\nplt.show()',
  )
  assert.equal(exec.error, undefined)
  const fig = exec.results.find((r) => r.png)
  assert.ok(fig, JSON.stringify(exec.results.map((r) => r.formats())))
  const png = Buffer.from(fig.png, 'base64')
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG signature')
  assert.equal(fig.chart.type, 'line')
  assert.equal(fig.chart.title, 'Growth')
  assert.equal(fig.chart.x_label, 'day')
  assert.deepEqual(fig.chart.elements[0].points, [[1, 2], [2, 4], [3, 8]])
})

test('a pandas DataFrame comes back as html and text', { timeout: 60_000 }, async () => {
  const exec = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": [3, 4]})')
  const main = exec.results.find((r) => r.isMainResult)
  assert.ok(main)
  assert.match(main.html, /<table/)
  assert.match(main.text, /a\s+b/)
  assert.ok(main.formats().includes('html'))
})

test('createCodeContext isolates variables; contexts list and remove', { timeout: 60_000 }, async () => {
  await sbx.runCode('shared = "default"')
  const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
  assert.ok(ctx.id)
  assert.equal(ctx.cwd, '/tmp')
  const missing = await sbx.runCode('shared', { context: ctx })
  assert.equal(missing.error.name, 'NameError')
  await sbx.runCode('shared = "mine"', { context: ctx })
  assert.equal((await sbx.runCode('shared', { context: ctx })).text, "'mine'")
  assert.equal((await sbx.runCode('shared')).text, "'default'")
  assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, "'/tmp'")
  const listed = await sbx.listCodeContexts()
  assert.ok(listed.some((c) => c.id === ctx.id))
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('shared', { context: ctx })).error.name, 'NameError', 'a restart forgets')
  await sbx.removeCodeContext(ctx)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
})

test('runCode with timeoutMs interrupts a loop and the context stays usable', { timeout: 60_000 }, async () => {
  await sbx.runCode('counter = 0')
  const started = Date.now()
  await assert.rejects(sbx.runCode('while True:\n    counter += 1', { timeoutMs: 1500 }), (e) => e.name === 'TimeoutError')
  assert.ok(Date.now() - started < 10_000)
  // The kernel was interrupted, not restarted: its variables are there.
  const after = await sbx.runCode('counter > 0')
  assert.equal(after.text, 'True')
})

test('env vars per call are visible to that call only', { timeout: 60_000 }, async () => {
  const exec = await sbx.runCode('import os; os.environ.get("CALL_VAR")', { envs: { CALL_VAR: 'per-call' } })
  assert.equal(exec.text, "'per-call'")
  const later = await sbx.runCode('import os; os.environ.get("CALL_VAR")')
  assert.equal(later.text, undefined, 'None has no text result')
})

test('R runs on its own kernel: values, per-call variables, errors, contexts', { timeout: 90_000 }, async () => {
  const value = await sbx.runCode('r_total <- 40; r_total + 2', { language: 'r' })
  assert.equal(value.text, '[1] 42')
  const env = await sbx.runCode('Sys.getenv("R_CALL_VAR")', { language: 'r', envs: { R_CALL_VAR: "it's here" } })
  assert.equal(env.text, '[1] "it\'s here"')
  assert.equal((await sbx.runCode('Sys.getenv("R_CALL_VAR")', { language: 'r' })).text, '[1] ""')
  const failed = await sbx.runCode('stop("boom")', { language: 'r' })
  assert.match(failed.error.value, /boom/)
  const ctx = await sbx.createCodeContext({ language: 'r' })
  assert.equal(ctx.language, 'r')
  assert.equal((await sbx.runCode('exists("r_total")', { context: ctx })).text, '[1] FALSE')
  await sbx.removeCodeContext(ctx)
})

test('a language without a kernel answers a clear error', { timeout: 60_000 }, async () => {
  const exec = await sbx.runCode('console.log(1)', { language: 'javascript' })
  assert.equal(exec.error.name, 'UnsupportedLanguage')
  assert.match(exec.error.value, /no kernel in this template/)
})

test('running code takes the sandbox access token', { timeout: 60_000 }, async () => {
  const res = await fetch(`${d.sandboxUrl}/execute`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999' },
    body: JSON.stringify({ code: 'print("should not run")' }),
  })
  assert.equal(res.status, 401)
  assert.match(await res.text(), /access token/)
})

test('runCode on a base-template sandbox fails at once, saying why', { timeout: 60_000 }, async () => {
  const base = await Sandbox.create('base', { ...d.opts, metadata: meta('base') })
  try {
    const started = Date.now()
    await assert.rejects(base.runCode('1+1'), (e) => {
      assert.equal(e.name, 'NotFoundError', e.message)
      assert.match(e.message, /no code interpreter/)
      assert.match(e.message, /code-interpreter-v1/)
      return true
    })
    assert.ok(Date.now() - started < 5_000, 'no 60 s hang')
  } finally {
    await base.kill()
  }
})

test('a pooled interpreter sandbox runs code at once', { timeout: 180_000 }, async () => {
  await awaitPool(pooled, 1, 120_000)
  const p = await Sandbox.create({ ...pooled.opts, metadata: meta('pool') })
  try {
    assert.equal((await poolStatus(pooled)).hits, 1, 'the create adopted the pooled sandbox')
    const exec = await p.runCode('import numpy as np\nint(np.arange(4).sum())')
    assert.equal(exec.text, '6')
  } finally {
    await p.kill()
  }
})

test('a create with variables skips the pool, and its kernel sees them', { timeout: 180_000 }, async () => {
  await awaitPool(pooled, 1, 120_000)
  const before = await poolStatus(pooled)
  const p = await Sandbox.create({ ...pooled.opts, envs: { CREATE_VAR: 'from-create' }, metadata: meta('pool-env') })
  try {
    assert.equal((await poolStatus(pooled)).hits, before.hits, 'went cold')
    const exec = await p.runCode('import os; os.environ["CREATE_VAR"]')
    assert.equal(exec.text, "'from-create'")
  } finally {
    await p.kill()
  }
})

test('the server starts again when the sandbox is stopped and started', { timeout: 120_000 }, async () => {
  const s = await Sandbox.create({ ...d.opts, metadata: meta('restart') })
  try {
    await s.runCode('before = 1')
    for (const action of ['stop', 'start']) {
      const res = await fetch(`http://127.0.0.1:${d.apiPort}/v1/sandboxes/${s.sandboxId}/${action}`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${d.token}` },
      })
      assert.equal(res.status, 200, `${action}: ${await res.text()}`)
    }
    // A new kernel: the container restarted, so the old variables are gone,
    // and the server answers as soon as start has.
    const exec = await s.runCode('before')
    assert.equal(exec.error?.name, 'NameError')
    assert.equal((await s.runCode('2 + 2')).text, '4')
  } finally {
    await s.kill()
  }
})
