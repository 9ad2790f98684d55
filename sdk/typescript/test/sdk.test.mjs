// The SDK against a real daemon and the real Docker engine: the
// specification's example, streaming exec, files, retry safety through a
// proxy that loses answers, and the typed errors.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import {
  AuthError,
  HostnameConflictError,
  IdempotencyKeyMismatchError,
  NameConflictError,
  NotFoundError,
  PortPoolExhaustedError,
  Sandpit,
  TimeoutError,
} from '../dist/index.js'
import { setup, teardown, startDaemon, containers, client, freeRange, lossyProxy, get, eventually, unique } from './helpers.mjs'

let daemon
let sandpit
// One sandbox serves the exec and files tests.
let shared

before(async () => {
  await setup()
  daemon = await startDaemon({ name: 'sdk', args: ['--port-range', await freeRange(4)] })
  sandpit = client(daemon)
  shared = await sandpit.create({ labels: { test: 'shared' } })
})

after(async () => {
  await teardown()
})

test('the specification example: exposePort twice gives one public URL that serves the sandbox', async () => {
  const sandbox = await sandpit.create()
  await sandbox.files.write('/www/index.html', 'hello from the sandbox\n')
  // busybox httpd puts itself in the background; the exec returns at once.
  const started = await sandbox.exec('httpd -p 8080 -h /www')
  assert.equal(started.exitCode, 0, started.stderr)

  const first = await sandbox.exposePort(8080)
  const retry = await sandbox.exposePort(8080)
  assert.equal(first.publicUrl, retry.publicUrl)
  assert.equal(first.reused, false)
  assert.equal(retry.reused, true)
  assert.equal(first.protocol, 'http')

  const res = await eventually(async () => {
    const r = await get(first.publicUrl)
    assert.equal(r.status, 200)
    return r
  })
  assert.equal(res.body, 'hello from the sandbox\n')
})

test('exec streams output as it comes', async () => {
  const chunks = []
  const res = await shared.exec('echo first; sleep 1; echo second', { onStdout: (c) => chunks.push(c) })
  assert.equal(res.exitCode, 0)
  assert.equal(res.stdout, 'first\nsecond\n')
  // The first line reached the callback on its own, a second before the
  // command printed the second one: the output was not buffered to the end.
  assert.ok(chunks.length >= 2, `chunks ${JSON.stringify(chunks)}`)
  assert.equal(chunks[0], 'first\n')
  assert.equal(chunks.join(''), res.stdout)
})

// The causal version: the command cannot end until the client has seen its
// first line (the client's answer is a file the command waits for), so an
// output held back until the end would never arrive and the exec would time
// out.
test('exec delivers output while the command runs', async () => {
  const flag = `/tmp/seen-${randomBytes(4).toString('hex')}`
  let answered
  const res = await shared.exec(`echo ready; while [ ! -e ${flag} ]; do sleep 0.1; done; echo done`, {
    timeoutMs: 30_000,
    onStdout: (c) => {
      if (c.includes('ready')) answered ??= shared.files.write(flag, '')
    },
  })
  await answered
  assert.equal(res.exitCode, 0)
  assert.equal(res.stdout, 'ready\ndone\n')
})

test('exec returns 3 MB of output whole', async () => {
  const size = 3 * 1024 * 1024
  let streamed = 0
  const res = await shared.exec(`head -c ${size} /dev/zero | tr '\\0' a`, { onStdout: (c) => { streamed += c.length } })
  assert.equal(res.exitCode, 0, res.stderr)
  assert.equal(res.stdout.length, size)
  assert.equal(streamed, size)
  assert.match(res.stdout, /^a+$/)
})

test('exec reports the exit code, stderr, env and cwd', async () => {
  const errs = []
  const res = await shared.exec('echo "$GREETING from $(pwd)"; echo oops >&2; exit 3', {
    env: { GREETING: 'hi' },
    cwd: '/tmp',
    onStderr: (c) => errs.push(c),
  })
  assert.equal(res.exitCode, 3)
  assert.equal(res.stdout, 'hi from /tmp\n')
  assert.equal(res.stderr, 'oops\n')
  assert.equal(errs.join(''), 'oops\n')

  const argv = await shared.exec(['printf', '%s|', 'a b', 'c'])
  assert.equal(argv.stdout, 'a b|c|')
})

test('exec timeoutMs ends a command that runs too long', async () => {
  await assert.rejects(shared.exec('sleep 30', { timeoutMs: 500 }), TimeoutError)
})

test('files: 1 MiB binary round trip, text, listing, removal, missing file', async () => {
  const blob = randomBytes(1024 * 1024)
  await shared.files.write('/tmp/files-test/blob.bin', blob)
  const back = await shared.files.read('/tmp/files-test/blob.bin', { format: 'bytes' })
  assert.ok(back instanceof Uint8Array)
  assert.equal(Buffer.compare(Buffer.from(back), blob), 0)

  await shared.files.write('/tmp/files-test/note.txt', 'héllo\n')
  assert.equal(await shared.files.read('/tmp/files-test/note.txt'), 'héllo\n')
  await shared.files.write('/tmp/files-test/sub/deep.txt', 'x')

  const entries = await shared.files.list('/tmp/files-test')
  const byName = Object.fromEntries(entries.map((e) => [e.name, e]))
  assert.deepEqual(Object.keys(byName).sort(), ['blob.bin', 'note.txt', 'sub'])
  assert.equal(byName['blob.bin'].type, 'file')
  assert.equal(byName['blob.bin'].size, blob.length)
  assert.equal(byName['blob.bin'].path, '/tmp/files-test/blob.bin')
  assert.equal(byName.sub.type, 'dir')
  assert.ok(byName['note.txt'].modifiedTime instanceof Date)
  assert.equal((await shared.files.stat('/tmp/files-test/note.txt')).size, Buffer.byteLength('héllo\n'))

  await shared.files.remove('/tmp/files-test/note.txt')
  await assert.rejects(shared.files.read('/tmp/files-test/note.txt'), NotFoundError)
  await assert.rejects(shared.files.read('/no/such/file'), (err) => {
    assert.ok(err instanceof NotFoundError)
    assert.equal(err.status, 404)
    assert.equal(err.code, 'not_found')
    return true
  })
  await assert.rejects(shared.files.list('/no/such/dir'), NotFoundError)
  await assert.rejects(shared.files.stat('/no/such/file'), NotFoundError)
})

test('create survives a lost answer: the retry gets the same sandbox, and only one exists', async (t) => {
  const proxy = await lossyProxy(daemon, (method, path) => method === 'POST' && path === '/v1/sandboxes')
  t.after(() => proxy.close())
  const before = (await containers('sdk')).length
  const name = unique('lost-create')
  const sb = await client(daemon, proxy.url).create({ name, labels: { test: name } })
  assert.ok(proxy.dropped(), 'the proxy dropped the first answer')

  const creates = proxy.seen.filter((r) => r.method === 'POST' && r.path === '/v1/sandboxes')
  assert.equal(creates.length, 2, 'the SDK retried once')
  assert.ok(creates[0].key, 'the create carried an Idempotency-Key')
  assert.equal(creates[1].key, creates[0].key, 'the retry reused the key')

  assert.equal(sb.name, name)
  assert.equal(sb.state, 'running')
  const listed = await sandpit.list({ labels: { test: name } }).toArray()
  assert.deepEqual(listed.map((s) => s.id), [sb.id])
  // And one container more on the engine (the tests of this file run one
  // at a time, so nothing else made one meanwhile).
  assert.equal((await containers('sdk')).length, before + 1)
})

test('exposePort survives a lost answer: one exposure, one host port', async (t) => {
  const sb = await sandpit.create()
  const proxy = await lossyProxy(daemon, (method, path) => method === 'POST' && path.endsWith('/ports'))
  t.after(() => proxy.close())
  const viaProxy = await client(daemon, proxy.url).get(sb.id)
  const exposed = await viaProxy.exposePort(9000, { protocol: 'tcp' })
  assert.ok(proxy.dropped())
  const posts = proxy.seen.filter((r) => r.method === 'POST' && r.path.endsWith('/ports'))
  assert.equal(posts.length, 2)
  assert.equal(posts[1].key, posts[0].key)

  assert.equal(exposed.protocol, 'tcp')
  assert.ok(exposed.hostPort > 0)
  assert.equal(exposed.publicUrl, `tcp://127.0.0.1:${exposed.hostPort}`)
  const ports = await sb.ports()
  assert.deepEqual(ports.map((p) => [p.port, p.hostPort]), [[9000, exposed.hostPort]])
  const again = await sb.exposePort(9000, { protocol: 'tcp' })
  assert.equal(again.hostPort, exposed.hostPort)
  assert.equal(again.reused, true)
})

test('a caller-supplied Idempotency-Key is sent and honoured', async (t) => {
  const proxy = await lossyProxy(daemon, () => false)
  t.after(() => proxy.close())
  const sb = await client(daemon, proxy.url).get(shared.id)
  const key = unique('caller-key')
  const first = await sb.exposePort(8081, { idempotencyKey: key })
  // The same key and body replays the first answer, reused: false included.
  const replay = await sb.exposePort(8081, { idempotencyKey: key })
  assert.deepEqual(replay, first)
  assert.deepEqual(proxy.seen.filter((r) => r.path.endsWith('/ports')).map((r) => r.key), [key, key])
  // The same key for another request is refused, and nothing is done.
  await assert.rejects(sb.exposePort(8082, { idempotencyKey: key }), (err) => {
    assert.ok(err instanceof IdempotencyKeyMismatchError)
    assert.equal(err.status, 422)
    assert.equal(err.code, 'idempotency_key_mismatch')
    return true
  })
  assert.ok(!(await sb.ports()).some((p) => p.port === 8082))
})

test('typed errors: name conflict, hostname conflict, not found, bad token', async () => {
  const name = unique('taken')
  const a = await sandpit.create({ name })
  await assert.rejects(sandpit.create({ name }), (err) => {
    assert.ok(err instanceof NameConflictError)
    assert.equal(err.status, 409)
    assert.equal(err.code, 'name_conflict')
    assert.match(err.message, /name/)
    return true
  })

  const host = `${unique('app')}.example.test`
  await a.exposePort(8080) // a domain targets an exposed port
  const bound = await a.addCustomDomain(host, 8080)
  assert.equal(bound.hostname, host)
  assert.equal(bound.sandboxId, a.id)
  assert.deepEqual((await a.customDomains()).map((d) => d.hostname), [host])
  await assert.rejects(shared.addCustomDomain(host, 8080), HostnameConflictError)
  await a.removeCustomDomain(host)
  assert.deepEqual(await a.customDomains(), [])

  await assert.rejects(sandpit.get('sb-does-not-exist'), NotFoundError)
  const bad = new Sandpit({ apiUrl: sandpit.apiUrl, token: 'wrong' })
  await assert.rejects(bad.get(a.id), (err) => err instanceof AuthError && err.status === 401)

  await a.delete()
  await assert.rejects(a.refresh(), NotFoundError)
  await assert.rejects(a.exec('true'), NotFoundError)
})

test('a full host-port pool is a PortPoolExhaustedError, not retried', async (t) => {
  const small = await startDaemon({ name: 'sdk-pool', args: ['--port-range', await freeRange(1)] })
  t.after(() => small.stop())
  const proxy = await lossyProxy(small, () => false)
  t.after(() => proxy.close())
  const sb = await client(small, proxy.url).create()
  const got = await sb.exposePort(9000, { protocol: 'tcp' })
  assert.ok(got.hostPort > 0)
  await assert.rejects(sb.exposePort(9001, { protocol: 'tcp' }), (err) => {
    assert.ok(err instanceof PortPoolExhaustedError)
    assert.equal(err.status, 503)
    assert.equal(err.code, 'port_pool_exhausted')
    return true
  })
  assert.equal(proxy.seen.filter((r) => r.path.endsWith('/ports')).length, 2, 'the refused expose was sent once')
})

test('list iterates pages and filters by label; lifecycle calls update the sandbox', async () => {
  const label = unique('list')
  const made = []
  for (let i = 0; i < 3; i++) made.push(await sandpit.create({ labels: { test: label } }))
  const pages = []
  for await (const page of sandpit.list({ labels: { test: label }, pageSize: 2 }).pages()) pages.push(page.map((s) => s.id))
  assert.deepEqual(pages.map((p) => p.length), [2, 1])
  const ids = []
  for await (const sb of sandpit.list({ labels: { test: label }, pageSize: 2 })) ids.push(sb.id)
  assert.deepEqual(ids.sort(), made.map((s) => s.id).sort())

  const sb = made[0]
  assert.equal((await sb.stop()).state, 'stopped')
  assert.equal((await sb.start()).state, 'running')
  assert.equal((await sb.exec('echo back')).stdout, 'back\n')
  assert.equal((await sandpit.get(sb.id)).state, 'running')
})

// /v1/events is being added to the daemon separately: until it is, the
// iterator must fail with NotFoundError; once it is, a sandbox's creation
// shows up in the stream.
test('events: /v1/events streams sandbox changes, or is a NotFoundError where missing', async (t) => {
  const probe = await fetch(`${sandpit.apiUrl}/v1/events`, { headers: { authorization: `Bearer ${daemon.token}` }, signal: AbortSignal.timeout(5000) })
    .then(async (r) => { await r.body?.cancel(); return r.status }, () => 0)
  if (probe === 404) {
    await assert.rejects(sandpit.events().next(), NotFoundError)
    t.skip('the daemon has no /v1/events yet')
    return
  }
  const ac = new AbortController()
  const deadline = setTimeout(() => ac.abort(), 20_000)
  t.after(() => { clearTimeout(deadline); ac.abort() })
  const seen = []
  let made
  const found = (async () => {
    for await (const ev of sandpit.events({ signal: ac.signal })) {
      seen.push(ev)
      if (made && ev.sandboxId === made.id && ev.type === 'stopped') return ev
    }
    return undefined
  })()
  // Give the stream a moment to subscribe before the change it waits for.
  await new Promise((r) => setTimeout(r, 500))
  made = await sandpit.create({ labels: { test: 'events' } })
  await made.stop()
  const ev = await found
  assert.ok(ev, `no stopped event of ${made.id} among ${JSON.stringify(seen)}`)
  assert.equal(ev.state, 'stopped')
  assert.equal(ev.oldState, 'running')
  assert.ok(seen.some((e) => e.sandboxId === made.id && e.type === 'created'), 'the creation was announced too')
})

test('templates: build with a context and logs, create from it, replay of one key, a failed build, list and delete', async () => {
  const { mkdtempSync, writeFileSync } = await import('node:fs')
  const { tmpdir } = await import('node:os')
  const { join } = await import('node:path')
  const { execFileSync } = await import('node:child_process')
  const { TemplateBuildError } = await import('../dist/index.js')
  const dir = mkdtempSync(join(tmpdir(), 'sdk-tpl-'))
  writeFileSync(join(dir, 'greeting.txt'), 'hello from the sdk context\n')
  const context = new Uint8Array(execFileSync('tar', ['-C', dir, '-cf', '-', 'greeting.txt']))
  const name = unique('sdk-tpl')
  const lines = []
  const key = `tpl-${randomBytes(8).toString('hex')}`
  const opts = {
    name, context, idempotencyKey: key, onLogs: (l) => lines.push(l.message),
    dockerfile: 'FROM sandpit/base:test\nCOPY greeting.txt /greeting.txt\nRUN echo built >> /greeting.txt\n',
  }
  const { template, build } = await sandpit.templates.build(opts)
  assert.equal(build.state, 'ready')
  assert.equal(template.name, name)
  assert.ok(lines.some((l) => l.startsWith('built ')), `log lines: ${JSON.stringify(lines)}`)
  // The same key again is the same call: the first answer, no second build.
  const again = await sandpit.templates.build(opts)
  assert.equal(again.build.id, build.id)

  const sb = await sandpit.create({ template: name })
  const res = await sb.exec('cat /greeting.txt')
  assert.equal(res.stdout, 'hello from the sdk context\nbuilt\n')
  await sb.delete()

  assert.ok((await sandpit.templates.list()).some((t) => t.name === name && t.build?.state === 'ready'))
  const bad = unique('sdk-bad')
  await assert.rejects(sandpit.templates.build({ name: bad, dockerfile: 'FROM sandpit/base:test\nRUN exit 9\n' }),
    (err) => err instanceof TemplateBuildError && /9/.test(err.build.error))
  assert.equal((await sandpit.templates.get(bad)).build.state, 'error')

  for (const n of [name, bad]) await sandpit.templates.delete(n)
  await assert.rejects(sandpit.templates.get(name), NotFoundError)
})

test('snapshots and forks: snapshot, create from it, list, delete refused while in use; fork of 2 with one key answers twice the same', async () => {
  const src = await sandpit.create()
  await src.files.write('/root/snap.txt', 'kept')
  const name = unique('snap')
  const snap = await src.snapshot({ name })
  assert.equal(snap.kind, 'snapshot')
  assert.equal(snap.source_sandbox, src.id)
  const copy = await sandpit.create({ template: name })
  assert.equal(await copy.files.read('/root/snap.txt'), 'kept')
  assert.deepEqual((await sandpit.snapshots.list({ sandbox: src.id })).map((s) => s.id), [snap.id])
  await assert.rejects(sandpit.snapshots.delete(name), (e) => e.status === 409 && e.code === 'in_use')
  await copy.delete()
  await sandpit.snapshots.delete(name)
  assert.deepEqual(await sandpit.snapshots.list({ name }), [])

  const key = unique('fork-key')
  const forks = await src.fork({ count: 2, idempotencyKey: key })
  const again = await src.fork({ count: 2, idempotencyKey: key })
  assert.deepEqual(again.map((f) => f.id), forks.map((f) => f.id))
  for (const f of forks) {
    assert.equal(await f.files.read('/root/snap.txt'), 'kept')
    await f.delete()
  }
  await src.delete()
})

// runCode on the code-interpreter template (scripts/test.sh builds its image
// before the suites run): state in a named context, streamed output, a
// figure as a PNG, and an exception as the execution's error.
test('runCode: named contexts, streamed stdout, a chart, an exception', { timeout: 120_000 }, async () => {
  const sandbox = await sandpit.create({ template: 'code-interpreter-v1', labels: { test: 'code' } })
  try {
    await sandbox.runCode('total = 40', { context: 'work' })
    const sum = await sandbox.runCode('total + 2', { context: 'work' })
    assert.equal(sum.text, '42')
    const other = await sandbox.runCode('total', { context: 'elsewhere' })
    assert.equal(other.error?.name, 'NameError')

    const lines = []
    const printed = await sandbox.runCode('print("a"); print("b")', { onStdout: (t) => lines.push(t) })
    assert.equal(lines.join(''), 'a\nb\n')
    assert.deepEqual(printed.logs.stdout, lines)

    const plot = await sandbox.runCode('import matplotlib.pyplot as plt\nplt.bar(["x", "y"], [1, 2])\nplt.show()')
    const fig = plot.results.find((r) => r.png)
    assert.ok(fig, JSON.stringify(plot))
    assert.equal(Buffer.from(fig.png, 'base64').subarray(1, 4).toString(), 'PNG')
    assert.equal(fig.chart.type, 'bar')

    const failed = await sandbox.runCode('raise ValueError("nope")')
    assert.equal(failed.error?.name, 'ValueError')
    assert.equal(failed.error?.value, 'nope')

    await sandbox.deleteCodeContext('work')
    await sandbox.deleteCodeContext('work') // gone already: still fine
    const fresh = await sandbox.runCode('total', { context: 'work' })
    assert.equal(fresh.error?.name, 'NameError', 'a deleted context is made anew')
  } finally {
    await sandbox.delete()
  }
})
