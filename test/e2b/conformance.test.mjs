// E2B conformance beyond the happy path, on the realistic image
// (scripts/build-base-image.sh: Debian bookworm with python3, node, git,
// sudo and a `user` account), through the official, unmodified SDK: the
// sandbox's default user, file metadata, signed file URLs, list order,
// metrics windows, and what a client sees while a sandbox goes away.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { Sandbox, SandboxError, TimeoutError } from 'e2b'
import { setup, teardown, startDaemon, sleep, runId, repoRoot } from './helpers.mjs'

const run = promisify(execFile)
const T = 180_000 // per-test timeout
const baseImage = process.env.SANDPIT_BASE_IMAGE_REF || 'sandpit/base:latest'

let d
let opts

before(async () => {
  await setup()
  try {
    await run('docker', ['image', 'inspect', baseImage])
  } catch {
    // Cached by a hash of its recipe: instant once built on this machine.
    await run(join(repoRoot, 'scripts', 'build-base-image.sh'), [], { maxBuffer: 64 << 20 })
  }
  d = await startDaemon({ name: 'conformance', args: ['--default-image', baseImage] })
  opts = d.opts
})

after(async () => {
  await teardown()
})

const uniq = (tag) => ({ test: `${tag}-${randomBytes(4).toString('hex')}`, run: runId })

async function listAll(listOpts) {
  const paginator = Sandbox.list({ ...opts, ...listOpts })
  const out = []
  while (paginator.hasNext) out.push(...(await paginator.nextItems()))
  return out
}

describe('the base image and its user', () => {
  let sbx
  before(async () => { sbx = await Sandbox.create({ ...opts, metadata: uniq('identity') }) })
  after(async () => { await sbx?.kill() })

  test('commands run as user in /home/user unless root is asked for', async () => {
    const r = await sbx.commands.run('id -un; echo $HOME; pwd')
    assert.equal(r.stdout, 'user\n/home/user\n/home/user\n')
    const root = await sbx.commands.run('id -un; echo $HOME; pwd', { user: 'root' })
    assert.equal(root.stdout, 'root\n/root\n/root\n')
    const groups = await sbx.commands.run('id -Gn')
    assert.match(groups.stdout, /\bsudo\b/)
    const env = await sbx.commands.run('env')
    assert.match(env.stdout, /^USER=user$/m)
    assert.doesNotMatch(env.stdout, /SANDPIT_AGENT/)
  })

  test('python3, node, git, sudo and tput are there', async () => {
    assert.equal((await sbx.commands.run("python3 -c 'print(1+1)'")).stdout, '2\n')
    assert.equal((await sbx.commands.run('sudo -n true')).exitCode, 0)
    assert.equal((await sbx.commands.run('sudo -n id -un')).stdout, 'root\n')
    assert.match((await sbx.commands.run('node -e "console.log(process.version)"')).stdout, /^v\d+/)
    assert.match((await sbx.commands.run('git --version')).stdout, /^git version/)
    assert.equal((await sbx.commands.run('TERM=xterm tput cols')).exitCode, 0)
    const venv = await sbx.commands.run('python3 -m venv v && ./v/bin/pip --version')
    assert.match(venv.stdout, /^pip /)
  })

  test('files the user writes are the user\'s', async () => {
    const w = await sbx.files.write('a.txt', 'hello')
    assert.equal(w.path, '/home/user/a.txt')
    const info = await sbx.files.getInfo('a.txt')
    assert.equal(info.owner, 'user')
    assert.equal(info.group, 'user')
    assert.equal(info.permissions, '-rw-r--r--')
    assert.equal((await sbx.commands.run('stat -c %U:%G /home/user/a.txt')).stdout, 'user:user\n')
    // Root's files are root's, and relative paths resolve in root's home.
    const rw = await sbx.files.write('r.txt', 'x', { user: 'root' })
    assert.equal(rw.path, '/root/r.txt')
    assert.equal((await sbx.files.getInfo('/root/r.txt', { user: 'root' })).owner, 'root')
  })

  test('metadata written with a file comes back from write, getInfo and list', async () => {
    const metadata = { author: 'alice', purpose: 'conformance test' }
    const w = await sbx.files.write('meta/m.txt', 'x', { metadata })
    assert.deepEqual(w.metadata, metadata)
    assert.deepEqual((await sbx.files.getInfo('meta/m.txt')).metadata, metadata)
    const listed = await sbx.files.list('meta')
    assert.equal(listed.length, 1)
    assert.deepEqual(listed[0].metadata, metadata)
    // A file written without metadata has none.
    await sbx.files.write('meta/plain.txt', 'y')
    assert.equal((await sbx.files.getInfo('meta/plain.txt')).metadata, undefined)
  })

  test('metadata is E2B\'s user.e2b.* attributes, and a rewrite without metadata clears it', async () => {
    await sbx.files.write('meta/x.txt', 'x', { metadata: { purpose: 'xattr' } })
    // Code in the sandbox sets metadata the way E2B's own tests do.
    await sbx.commands.run(`python3 -c "import os; os.setxattr('/home/user/meta/x.txt', 'user.e2b.author', b'mish')"`)
    assert.deepEqual((await sbx.files.getInfo('meta/x.txt')).metadata, { purpose: 'xattr', author: 'mish' })
    await sbx.files.write('meta/x.txt', 'overwritten')
    assert.equal((await sbx.files.getInfo('meta/x.txt')).metadata, undefined)
    assert.equal(await sbx.files.read('meta/x.txt'), 'overwritten')
  })

  test('writing files under a missing directory the user may not make (/0) makes it for the user', async () => {
    const written = await sbx.files.write([
      { path: '/0/multi_test_file0.txt', data: 'zero' },
      { path: '/0/multi_test_file1.txt', data: 'one' },
    ])
    assert.deepEqual(written.map((w) => w.path), ['/0/multi_test_file0.txt', '/0/multi_test_file1.txt'])
    assert.equal(await sbx.files.read('/0/multi_test_file1.txt'), 'one')
    const owners = await sbx.commands.run('stat -c %U /0 /0/multi_test_file0.txt')
    assert.equal(owners.stdout.trim(), 'user\nuser')
    await sbx.commands.run('rm -rf /0', { user: 'root' })
  })
})

describe('signed file URLs', () => {
  let sbx
  before(async () => {
    sbx = await Sandbox.create({ ...opts, secure: true, metadata: uniq('signed') })
    await sbx.files.write('/home/user/s.txt', 'signed content')
  })
  after(async () => { await sbx?.kill() })

  const tamper = (u) => {
    const url = new URL(u)
    const sig = url.searchParams.get('signature')
    url.searchParams.set('signature', sig.slice(0, -2) + (sig.endsWith('AA') ? 'BB' : 'AA'))
    return url.toString()
  }
  const upload = (url, body) => {
    const form = new FormData()
    form.append('file', new Blob([body]), 'ignored')
    return fetch(url, { method: 'POST', body: form })
  }

  test('a signed download URL works without the token, not after expiry, not tampered', async () => {
    const url = await sbx.downloadUrl('/home/user/s.txt', { useSignatureExpiration: 60 })
    // The SDK puts it at the root of E2B_SANDBOX_URL's origin.
    assert.equal(new URL(url).pathname, '/files')
    const ok = await fetch(url)
    assert.equal(ok.status, 200)
    assert.equal(await ok.text(), 'signed content')

    const bad = await fetch(tamper(url))
    assert.equal(bad.status, 401)
    await bad.arrayBuffer()

    const short = await sbx.downloadUrl('/home/user/s.txt', { useSignatureExpiration: 1 })
    await sleep(2100)
    const expired = await fetch(short)
    assert.equal(expired.status, 401)
    assert.match((await expired.json()).message, /expired/)

    // Without an expiry the signature does not lapse.
    const forever = await fetch(await sbx.downloadUrl('/home/user/s.txt'))
    assert.equal(await forever.text(), 'signed content')
  })

  test('a signed upload URL works without the token, not after expiry, not tampered', async () => {
    const url = await sbx.uploadUrl('/home/user/up.txt', { useSignatureExpiration: 60 })
    assert.equal(new URL(url).pathname, '/files')
    const ok = await upload(url, 'uploaded')
    assert.equal(ok.status, 200, await ok.clone().text())
    assert.equal((await ok.json())[0].path, '/home/user/up.txt')
    assert.equal(await sbx.files.read('/home/user/up.txt'), 'uploaded')
    assert.equal((await sbx.files.getInfo('/home/user/up.txt')).owner, 'user')

    const bad = await upload(tamper(await sbx.uploadUrl('/home/user/t.txt', { useSignatureExpiration: 60 })), 'no')
    assert.equal(bad.status, 401)
    await bad.arrayBuffer()

    const short = await sbx.uploadUrl('/home/user/e.txt', { useSignatureExpiration: 1 })
    await sleep(2100)
    const expired = await upload(short, 'no')
    assert.equal(expired.status, 401)
    await expired.arrayBuffer()
    assert.equal(await sbx.files.exists('/home/user/t.txt'), false)
    assert.equal(await sbx.files.exists('/home/user/e.txt'), false)

    // A download signature is no upload signature.
    const readSig = await sbx.downloadUrl('/home/user/up.txt', { useSignatureExpiration: 60 })
    const wrongOp = await upload(readSig, 'no')
    assert.equal(wrongOp.status, 401)
    await wrongOp.arrayBuffer()
  })
})

describe('listing and metrics', () => {
  test('Sandbox.list orders by creation: asc, desc, and newest first by default', async () => {
    const md = uniq('order')
    const made = []
    try {
      // Each body differs (identical creates within the replay window are
      // one sandbox), and each create completes before the next starts.
      for (let i = 0; i < 3; i++) made.push(await Sandbox.create({ ...opts, metadata: { ...md, i: String(i) } }))
      const ids = made.map((s) => s.sandboxId)
      const asc = await listAll({ query: { metadata: md }, order: 'asc', limit: 2 })
      assert.deepEqual(asc.map((s) => s.sandboxId), ids)
      const desc = await listAll({ query: { metadata: md }, order: 'desc', limit: 2 })
      assert.deepEqual(desc.map((s) => s.sandboxId), [...ids].reverse())
      const dflt = await listAll({ query: { metadata: md } })
      assert.deepEqual(dflt.map((s) => s.sandboxId), [...ids].reverse())
    } finally {
      await Promise.all(made.map((s) => s.kill()))
    }
  })

  test('Sandbox.list pages running and paused sandboxes by state: newest first, the last page has no token', async () => {
    const md = uniq('states')
    const made = []
    try {
      for (let i = 0; i < 3; i++) made.push(await Sandbox.create({ ...opts, metadata: { ...md, i: String(i) } }))
      await made[1].betaPause()
      const paused = Sandbox.list({ ...opts, query: { metadata: md, state: ['paused'] } })
      const p1 = await paused.nextItems()
      assert.deepEqual(p1.map((s) => [s.sandboxId, s.state]), [[made[1].sandboxId, 'paused']])
      assert.equal(paused.hasNext, false)
      const running = Sandbox.list({ ...opts, query: { metadata: md, state: ['running'] }, limit: 1 })
      const r1 = await running.nextItems()
      assert.deepEqual(r1.map((s) => s.sandboxId), [made[2].sandboxId])
      assert.equal(running.hasNext, true)
      assert.ok(running.nextToken)
      const r2 = await running.nextItems()
      assert.deepEqual(r2.map((s) => [s.sandboxId, s.state]), [[made[0].sandboxId, 'running']])
      assert.equal(running.hasNext, false)
      assert.equal(running.nextToken, undefined)
      const both = await listAll({ query: { metadata: md, state: ['running', 'paused'] }, limit: 2 })
      assert.deepEqual(both.map((s) => s.sandboxId), [...made].reverse().map((s) => s.sandboxId))
    } finally {
      await Promise.all(made.map((s) => s.kill()))
    }
  })

  test('getMetrics returns the samples inside the window', async () => {
    const sbx = await Sandbox.create({ ...opts, metadata: uniq('metrics') })
    try {
      const hourAgo = Date.now() - 3600_000
      const past = await sbx.getMetrics({ start: new Date(hourAgo - 600_000), end: new Date(hourAgo) })
      assert.deepEqual(past, [])
      // The daemon samples every 5 s: within a few seconds the last
      // minute holds samples, and only samples of the last minute.
      let recent = []
      let start, end
      for (let i = 0; i < 40 && recent.length === 0; i++) {
        await sleep(500)
        start = new Date(Date.now() - 60_000)
        end = new Date()
        recent = await sbx.getMetrics({ start, end })
      }
      assert.ok(recent.length >= 1, 'no sample within the last minute')
      for (const m of recent) {
        const t = m.timestamp.getTime()
        assert.ok(t >= Math.round(start.getTime() / 1000) * 1000 && t < (Math.round(end.getTime() / 1000) + 1) * 1000,
          `sample at ${m.timestamp.toISOString()} outside ${start.toISOString()}..${end.toISOString()}`)
        assert.ok(m.memTotal > 0 && m.cpuCount >= 1)
      }
    } finally {
      await sbx.kill()
    }
  })
})

// hangBound separates an answer from a wait: a gateway that dials a gone
// sandbox's address, or waits for a dying one, answers after seconds. It is
// no performance check; the tests report the times they saw.
const hangBound = 3000

describe('a sandbox going away', () => {
  test('kill() during commands.run rejects the command promptly with the SDK\'s error', async (t) => {
    const sbx = await Sandbox.create({ ...opts, metadata: uniq('kill-run') })
    const running = sbx.commands.run('sleep 60').then(
      () => ({ ok: true }),
      (err) => ({ err, at: performance.now() }),
    )
    // The command is running once ps shows it.
    for (let i = 0; i < 50; i++) {
      if ((await sbx.commands.run('pgrep -x sleep', { user: 'root' }).catch((e) => e)).exitCode === 0) break
      await sleep(100)
    }
    const killedAt = performance.now()
    assert.equal(await sbx.kill(), true)
    const killReturned = performance.now()
    const outcome = await running
    assert.ok(!outcome.ok, 'the command succeeded')
    const after = outcome.at - killedAt
    t.diagnostic(`command rejected ${after.toFixed(0)} ms after kill() began (${outcome.err.name}); kill() took ${(killReturned - killedAt).toFixed(0)} ms`)
    assert.ok(outcome.err instanceof SandboxError, `not an SDK error: ${outcome.err}`)
    assert.ok(outcome.err instanceof TimeoutError, `${outcome.err.name}: ${outcome.err.message}`)
    assert.ok(after < hangBound, `rejected ${after.toFixed(0)} ms after kill() (kill took ${(killReturned - killedAt).toFixed(0)} ms)`)
  })

  test('requests while kill() is under way are answered at once', async (t) => {
    const sbx = await Sandbox.create({ ...opts, metadata: uniq('dying') })
    const id = sbx.sandboxId
    const killing = sbx.kill()
    let slowest = 0
    let answered = 0
    // Ask until the kill is done: every answer, whatever it is, is prompt.
    for (let done = false; !done;) {
      done = await Promise.race([killing.then(() => true), sleep(20).then(() => false)])
      const began = performance.now()
      const res = await fetch(d.sandboxUrl + '/health', { headers: { 'E2b-Sandbox-Id': id } })
      await res.arrayBuffer()
      slowest = Math.max(slowest, performance.now() - began)
      answered++
      if (res.status !== 204) {
        assert.equal(res.status, 502)
        assert.equal(res.headers.get('content-type'), 'application/json')
      }
    }
    t.diagnostic(`${answered} requests during kill(), slowest ${slowest.toFixed(1)} ms`)
    // Not a speed figure (the diagnostic reports it): the bound only tells
    // an answer from a gateway left waiting on a dying upstream, which takes
    // seconds, on a loaded CI machine.
    assert.ok(slowest < hangBound, `slowest answer during kill(): ${slowest.toFixed(0)} ms`)
  })

  test('the gateway answers for a deleted sandbox at once, in E2B\'s error shape', async (t) => {
    const sbx = await Sandbox.create({ ...opts, metadata: uniq('gone') })
    const id = sbx.sandboxId
    assert.equal(await sbx.kill(), true)
    for (const [path, init] of [
      ['/health', {}],
      ['/process.Process/List', { method: 'POST', body: '{}', headers: { 'Content-Type': 'application/json' } }],
      ['/files?path=/tmp/x', {}],
    ]) {
      const began = performance.now()
      const res = await fetch(d.sandboxUrl + path, {
        ...init,
        headers: { ...(init.headers || {}), 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983' },
      })
      const body = await res.json()
      const took = performance.now() - began
      assert.equal(res.status, 502, path)
      assert.equal(body.code, 502)
      assert.equal(typeof body.message, 'string')
      t.diagnostic(`${path} for a deleted sandbox: ${res.status} in ${took.toFixed(1)} ms`)
      assert.ok(took < hangBound, `${path} took ${took.toFixed(1)} ms`)
    }
    // The SDK reads that as a sandbox that is no longer running.
    await assert.rejects(sbx.commands.run('true'), (err) => err instanceof SandboxError)
  })
})
