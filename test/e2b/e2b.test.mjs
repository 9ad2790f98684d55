// Conformance of sandpit's E2B facade with the official, unmodified `e2b` SDK
// (the version pinned in package-lock.json), against real daemons and the
// local Docker engine. The main daemon is reached exactly as a user would:
// through E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL. The other daemons
// (short replay window, crash points) get the same settings as SDK options.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { randomBytes } from 'node:crypto'
import {
  Sandbox,
  CommandExitError,
  FileNotFoundError,
  AuthenticationError,
  SandboxError,
  SandboxNotFoundError,
  ApiClient,
  ConnectionConfig,
} from 'e2b'
import { setup, teardown, startDaemon, containers, sleep, runId } from './helpers.mjs'

const T = 120_000 // per-test timeout

let main

before(async () => {
  await setup()
  main = await startDaemon({ name: 'main' })
  process.env.E2B_API_KEY = main.token
  process.env.E2B_API_URL = main.apiUrl
  process.env.E2B_SANDBOX_URL = main.sandboxUrl
})

after(async () => {
  await teardown()
})

// uniq gives each test its own metadata, so identical-body dedupe never joins
// two tests' creates and list filters see only the test's own sandboxes.
const uniq = (tag) => ({ test: `${tag}-${randomBytes(4).toString('hex')}`, run: runId })

async function listAll(opts) {
  const paginator = Sandbox.list(opts)
  const out = []
  let pages = 0
  while (paginator.hasNext) {
    out.push(...(await paginator.nextItems()))
    pages++
  }
  return { items: out, pages }
}

describe('commands', () => {
  let sbx
  before(async () => {
    sbx = await Sandbox.create({ metadata: uniq('commands'), envs: { FROM_CREATE: 'yes' } })
  })
  after(async () => { await sbx?.kill() })

  test('run echo hello returns stdout', async () => {
    const r = await sbx.commands.run('echo hello')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hello\n')
  })

  test('a non-zero exit raises CommandExitError with its exit code and stderr', async () => {
    await assert.rejects(sbx.commands.run('echo oops >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err}`)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stderr, 'oops\n')
      // envd names the exit in the end event's error, which the SDK makes
      // the message of the error.
      assert.equal(err.error, 'exit status 3')
      assert.match(err.message, /exit status 3/)
      return true
    })
  })

  test('envs and cwd, with create-time envVars as defaults', async () => {
    await sbx.files.makeDir('/tmp/work dir')
    const r = await sbx.commands.run('echo "$GREETING $FROM_CREATE"; pwd', {
      envs: { GREETING: 'hi there' },
      cwd: '/tmp/work dir',
    })
    assert.equal(r.stdout, 'hi there yes\n/tmp/work dir\n')
  })

  test('streams output as it happens', async () => {
    const chunks = []
    const r = await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.2; done', {
      onStdout: (d) => chunks.push([Date.now(), d]),
    })
    assert.equal(r.stdout, '1\n2\n3\n')
    assert.ok(chunks.length >= 2, `output arrived in ${chunks.length} chunk(s); want it streamed`)
    assert.ok(chunks.at(-1)[0] - chunks[0][0] >= 250, 'chunks arrived together: the gateway buffered the stream')
  })

  test('a background command is listed, then kill() ends it', async () => {
    const h = await sbx.commands.run('sleep 600', { background: true })
    assert.ok(h.pid > 0)
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === h.pid), `pid ${h.pid} not in ${JSON.stringify(listed)}`)
    assert.equal(await h.kill(), true)
    const res = await h.wait().catch((e) => e)
    assert.ok(res instanceof CommandExitError || res.exitCode !== 0, `killed command ended with ${JSON.stringify(res)}`)
    const after = await sbx.commands.list()
    assert.ok(!after.some((p) => p.pid === h.pid), 'killed process still listed')
  })
})

describe('files', () => {
  let sbx
  before(async () => {
    sbx = await Sandbox.create({ metadata: uniq('files') })
  })
  after(async () => { await sbx?.kill() })

  test('write and read text', async () => {
    const info = await sbx.files.write('/tmp/hello.txt', 'héllo\nworld')
    assert.equal(info.path, '/tmp/hello.txt')
    assert.equal(await sbx.files.read('/tmp/hello.txt'), 'héllo\nworld')
  })

  test('write and read binary', async () => {
    const data = new Uint8Array(70_000).map((_, i) => (i * 7 + 3) % 256)
    await sbx.files.write('/tmp/blob.bin', data.buffer)
    const back = await sbx.files.read('/tmp/blob.bin', { format: 'bytes' })
    assert.deepEqual(Buffer.from(back), Buffer.from(data))
  })

  test('makeDir, list, exists, rename, remove', async () => {
    assert.equal(await sbx.files.makeDir('/tmp/d/sub'), true)
    assert.equal(await sbx.files.makeDir('/tmp/d/sub'), false)
    await sbx.files.write('/tmp/d/a.txt', 'a')
    const entries = await sbx.files.list('/tmp/d')
    const names = entries.map((e) => `${e.name}:${e.type}`).sort()
    assert.deepEqual(names, ['a.txt:file', 'sub:dir'])
    assert.equal(await sbx.files.exists('/tmp/d/a.txt'), true)
    assert.equal(await sbx.files.exists('/tmp/d/nope'), false)
    const moved = await sbx.files.rename('/tmp/d/a.txt', '/tmp/d/b.txt')
    assert.equal(moved.path, '/tmp/d/b.txt')
    assert.equal(await sbx.files.exists('/tmp/d/a.txt'), false)
    assert.equal(await sbx.files.read('/tmp/d/b.txt'), 'a')
    await sbx.files.remove('/tmp/d')
    assert.equal(await sbx.files.exists('/tmp/d'), false)
  })

  test('reading a missing file raises FileNotFoundError', async () => {
    await assert.rejects(sbx.files.read('/tmp/does-not-exist'), FileNotFoundError)
  })
})

describe('lifecycle', () => {
  test('getInfo, metrics, the proxy route, setTimeout', async () => {
    const md = uniq('info')
    const sbx = await Sandbox.create({ metadata: md, timeoutMs: 120_000 })
    try {
      const info = await sbx.getInfo()
      assert.equal(info.sandboxId, sbx.sandboxId)
      assert.equal(info.templateId, 'base')
      assert.deepEqual(info.metadata, md)
      assert.equal(info.state, 'running')
      assert.match(info.envdVersion, /^\d+\.\d+\.\d+$/)
      const life = info.endAt - info.startedAt
      assert.ok(Math.abs(life - 120_000) < 2_000, `lifetime ${life} ms, want 120 s`)

      await sbx.setTimeout(30_000)
      const moved = await sbx.getInfo()
      const left = moved.endAt - Date.now()
      assert.ok(left > 20_000 && left <= 31_000, `setTimeout left ${left} ms, want about 30 s`)

      const metrics = await sbx.getMetrics()
      assert.ok(metrics.length >= 1 && metrics[0].memTotal >= 0)

      // Without E2B_SANDBOX_URL the SDK calls 49983-<id>.<domain>; the
      // daemon's proxy listener routes that host to the sandbox agent.
      assert.equal(sbx.sandboxDomain, `localhost:${main.proxyPort}`)
      const status = await new Promise((resolveStatus, reject) => {
        const req = request({
          host: '127.0.0.1', port: main.proxyPort, path: '/health',
          headers: { Host: `49983-${sbx.sandboxId}.${sbx.sandboxDomain}` },
        }, (res) => { res.resume(); resolveStatus(res.statusCode) })
        req.on('error', reject)
        req.end()
      })
      assert.ok(status >= 200 && status < 300, `agent health via the proxy host route: ${status}`)

      // The gateway passes X-Access-Token through and the agent checks it.
      const file = (token) => fetch(`${main.sandboxUrl}/files?path=/etc/hostname`, {
        headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': token },
      })
      assert.equal((await file('wrong')).status, 401)
      assert.equal((await file(sbx.envdAccessToken)).status, 200)
    } finally {
      await sbx.kill()
    }
  })

  test('Sandbox.list filters by metadata and pages', async () => {
    const group = uniq('list').test
    const made = await Promise.all([0, 1, 2].map((i) =>
      Sandbox.create({ metadata: { group, 'odd key&=': `v ${i}%` } })))
    const other = await Sandbox.create({ metadata: { group: `${group}-other` } })
    try {
      const { items, pages } = await listAll({ query: { metadata: { group } }, limit: 2 })
      assert.deepEqual(items.map((s) => s.sandboxId).sort(), made.map((s) => s.sandboxId).sort())
      assert.equal(pages, 2)
      const one = await listAll({ query: { metadata: { group, 'odd key&=': 'v 1%' } } })
      assert.deepEqual(one.items.map((s) => s.sandboxId), [made[1].sandboxId])
      assert.equal(one.items[0].state, 'running')
    } finally {
      await Promise.all([...made, other].map((s) => s.kill()))
    }
  })

  test('kill() is true, then Sandbox.kill(id) is false', async () => {
    const sbx = await Sandbox.create({ metadata: uniq('kill') })
    assert.equal(await sbx.kill(), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
    await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
  })

  test('Sandbox.connect, and pause then connect resumes', async () => {
    const md = uniq('pause')
    const sbx = await Sandbox.create({ metadata: md })
    try {
      await sbx.files.write('/tmp/state', 'kept')
      const same = await Sandbox.connect(sbx.sandboxId)
      assert.equal((await same.commands.run('cat /tmp/state')).stdout, 'kept')

      assert.equal(await sbx.pause(), true)
      assert.equal(await sbx.pause(), false, 'pausing a paused sandbox')
      assert.equal((await sbx.getInfo()).state, 'paused')
      const paused = await listAll({ query: { metadata: md, state: ['paused'] } })
      assert.deepEqual(paused.items.map((s) => s.sandboxId), [sbx.sandboxId])
      const running = await listAll({ query: { metadata: md, state: ['running'] } })
      assert.equal(running.items.length, 0)

      const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
      assert.equal((await resumed.getInfo()).state, 'running')
      assert.equal((await resumed.commands.run('cat /tmp/state')).stdout, 'kept')
    } finally {
      await sbx.kill()
    }
  })

  test('a sandbox past its timeout is gone', async () => {
    const sbx = await Sandbox.create({ metadata: uniq('expire'), timeoutMs: 2_000 })
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
    const deadline = Date.now() + 20_000
    for (;;) {
      const gone = await Sandbox.getInfo(sbx.sandboxId).then(() => false, (e) => {
        if (e instanceof SandboxNotFoundError) return true
        throw e
      })
      if (gone) break
      assert.ok(Date.now() < deadline, 'sandbox outlived its timeout')
      await sleep(250)
    }
    assert.equal(await sbx.isRunning(), false)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  })
})

describe('errors', () => {
  test('a wrong API key raises AuthenticationError', async () => {
    await assert.rejects(Sandbox.create({ apiKey: 'not-the-token', metadata: uniq('auth') }), AuthenticationError)
    await assert.rejects(Sandbox.list({ apiKey: 'not-the-token' }).nextItems(), AuthenticationError)
  })

  test('an unknown template is a clear error and creates nothing', async () => {
    const before = (await containers('main')).length
    const md = uniq('template')
    await assert.rejects(Sandbox.create('no-such-template', { metadata: md }), (err) => {
      assert.ok(err instanceof SandboxError, `got ${err}`)
      assert.match(err.message, /^400: .*no-such-template/)
      return true
    })
    assert.equal((await containers('main')).length, before)
    assert.equal((await listAll({ query: { metadata: md } })).items.length, 0)
  })
  test('an E2B feature sandpit lacks is a clear error, not a missing resource', async () => {
    // Sandbox logs are E2B's log store, which sandpit does not keep. The
    // path names a sandbox, so a 404 would read as "sandbox not found":
    // it is a 501 that says what is missing. (No SDK method reads the
    // logs any more, so the SDK's own API client asks.)
    const client = new ApiClient(new ConnectionConfig())
    const res = await client.api.GET('/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: `i${runId}` } } })
    assert.equal(res.response.status, 501)
    assert.match(res.error?.message ?? '', /not implemented by sandpit/)
  })
})

describe('create dedupe', () => {
  test('a storm of 10 identical creates is one sandbox and one container', async () => {
    const before = await containers('main')
    const md = uniq('storm')
    const all = await Promise.all(Array.from({ length: 10 }, () => Sandbox.create({ metadata: md, envs: { A: '1' } })))
    try {
      const ids = new Set(all.map((s) => s.sandboxId))
      assert.equal(ids.size, 1, `ids: ${[...ids]}`)
      const after = await containers('main')
      assert.equal(after.filter((c) => !before.includes(c)).length, 1, 'containers made by the storm')
      assert.equal((await all[9].commands.run('echo $A')).stdout, '1\n')
    } finally {
      await all[0].kill()
    }
  })

  test('creates that differ in metadata are different sandboxes', async () => {
    const md = uniq('differ')
    const [a, b] = await Promise.all([
      Sandbox.create({ metadata: { ...md, n: '1' } }),
      Sandbox.create({ metadata: { ...md, n: '2' } }),
    ])
    try {
      assert.notEqual(a.sandboxId, b.sandboxId)
    } finally {
      await Promise.all([a.kill(), b.kill()])
    }
  })

  test('with a 1 s replay window, an identical create after it is a new sandbox', async () => {
    const d = await startDaemon({ name: 'replay1s', args: ['--e2b-replay-window', '1s'] })
    try {
      const md = uniq('window')
      const a = await Sandbox.create({ ...d.opts, metadata: md })
      const again = await Sandbox.create({ ...d.opts, metadata: md })
      assert.equal(again.sandboxId, a.sandboxId, 'within the window')
      await sleep(1_500)
      const b = await Sandbox.create({ ...d.opts, metadata: md })
      assert.notEqual(b.sandboxId, a.sandboxId, 'after the window')
      assert.equal((await containers('replay1s')).length, 2)
      assert.equal((await b.commands.run('echo ok')).stdout, 'ok\n')
    } finally {
      await d.stop()
    }
  })
})

describe('crash recovery', () => {
  // The daemon dies at a crash point inside a create; the client's create
  // fails; the daemon restarts without the crash point; the same create,
  // retried, yields exactly one working sandbox.
  for (const point of ['after-container-create', 'before-response']) {
    test(`a daemon killed mid-create (${point}), restarted: the retried create yields one sandbox`, async () => {
      const name = `crash-${point}`
      const d = await startDaemon({ name, env: { SANDPIT_TEST_CRASH_POINT: point } })
      try {
        const md = uniq(name)
        await assert.rejects(Sandbox.create({ ...d.opts, metadata: md }))
        const exit = await d.exited
        assert.equal(exit.signal, 'SIGKILL', `daemon exit: ${JSON.stringify(exit)}`)

        await d.restart()
        const start = Date.now()
        const sbx = await Sandbox.create({ ...d.opts, metadata: md })
        assert.ok(Date.now() - start < 30_000, 'the retry waited out the dead attempt')
        assert.equal((await sbx.commands.run('echo recovered')).stdout, 'recovered\n')
        assert.equal((await containers(name)).length, 1, 'containers after the retry')
        const listed = await listAll({ ...d.opts, query: { metadata: md } })
        assert.deepEqual(listed.items.map((s) => s.sandboxId), [sbx.sandboxId])
        const again = await Sandbox.create({ ...d.opts, metadata: md })
        assert.equal(again.sandboxId, sbx.sandboxId, 'a second retry replays')
      } finally {
        await d.stop()
      }
    })
  }
})
