// The official, unmodified `e2b` SDK in the drop-in configuration (see
// dropin.mjs): --tls internal on the builtin router, E2B_DOMAIN and
// E2B_API_KEY only, the daemon's CA trusted through NODE_EXTRA_CA_CERTS.
// Every envd call goes to https://49983-<id>.<domain> and every getHost(port)
// to https://<port>-<id>.<domain>, through the daemon's preview proxy, before
// and after each kind of pause and resume and a daemon restart; watchDir,
// network.maskRequestHost and a kill during a command too.
//
// The boot marker is the start time of the sandbox's process 1 (field 22 of
// /proc/1/stat): it changes exactly when the container starts again.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Secret, FilesystemEventType, SandboxError, TimeoutError } from 'e2b'
import { dropInSuite, restartDaemon } from './dropin.mjs'
import { randomBytes } from 'node:crypto'
import { sleep, runId } from './helpers.mjs'

const T = 240_000
// Every create names its test: the daemon treats identical creates within
// a few seconds as one request retried (its idempotency replay), which
// tests making sandboxes one after another must not be.
const uniq = (tag) => ({ metadata: { test: `${tag}-${randomBytes(4).toString('hex')}`, run: runId } })

dropInSuite(import.meta.url, 'the E2B SDK', T, cases)

async function until(what, check, ms = 30_000) {
  const deadline = Date.now() + ms
  for (;;) {
    const err = await check().catch((e) => `${e}`)
    if (!err) return
    if (Date.now() > deadline) throw new Error(`${what}: ${err}`)
    await sleep(200)
  }
}

const bootMarker = async (sbx) => (await sbx.commands.run("cut -d' ' -f22 /proc/1/stat")).stdout.trim()

const serve = (sbx, port, page) =>
  sbx.commands.run(`mkdir -p /tmp/www${port} && printf '%s' '${page}' > /tmp/www${port}/index.html && httpd -p ${port} -h /tmp/www${port}`)

// page GETs https://<getHost(port)>/ until it answers 200, and returns what
// it answered last.
async function page(sbx, port, ms = 20_000) {
  let last
  await until(`https://${sbx.getHost(port)}/`, async () => {
    try {
      const res = await fetch(`https://${sbx.getHost(port)}/`, { signal: AbortSignal.timeout(15_000) })
      last = { status: res.status, body: await res.text() }
    } catch (err) {
      last = { error: `${err} ${err.cause ?? ''}` }
    }
    return last.status === 200 ? null : JSON.stringify(last)
  }, ms)
  return last
}

const waitState = (id, state) => until(`sandbox ${id} ${state}`, async () => {
  const info = await Sandbox.getInfo(id)
  return info.state === state ? null : `state ${info.state}`
})

// envdWorks checks the agent through the sandbox's own https host: a
// command, a file written and read back, and the health probe the SDK's
// isRunning uses.
async function envdWorks(sbx, file, content) {
  assert.equal(await sbx.isRunning(), true)
  assert.equal(await sbx.files.read(file), content)
  assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n')
}

function cases() {
  test('the SDK reaches the sandbox through its https host, not a debug URL', async () => {
    assert.ok(process.env.E2B_DOMAIN && !process.env.E2B_API_URL && !process.env.E2B_SANDBOX_URL)
    const sbx = await Sandbox.create(uniq('domain'))
    try {
      assert.equal(sbx.sandboxDomain, process.env.E2B_DOMAIN)
      assert.equal((await sbx.commands.run('echo hi')).stdout, 'hi\n')
    } finally {
      await sbx.kill()
    }
  })

  // E2B's own "firewall transform injects headers": a sidecar serves
  // go-httpbin's /headers shape on 8080; a sandbox whose network.rules set
  // a header for the sidecar's getHost(8080) curls it over https, by name,
  // and the header arrives. The sandbox's DNS answers the preview host with
  // the daemon, the egress proxy intercepts with the daemon's CA (which the
  // sandbox trusts) and hands the request to the preview proxy, verified
  // against the internal CA.
  test('a rule\'s transform reaches another sandbox\'s preview host by name over https', async () => {
    const sidecar = await Sandbox.create('debian', uniq('sidecar'))
    const token = `tok-${randomBytes(8).toString('hex')}`
    let sbx
    try {
      await sidecar.files.write('/tmp/headers.py', [
        'import http.server, json',
        'class H(http.server.BaseHTTPRequestHandler):',
        '    def do_GET(self):',
        '        out = {}',
        '        for k, v in self.headers.items():',
        '            out.setdefault(k, []).append(v)',
        '        b = json.dumps({"headers": out}).encode()',
        '        self.send_response(200)',
        '        self.send_header("Content-Type", "application/json")',
        '        self.send_header("Content-Length", str(len(b)))',
        '        self.end_headers()',
        '        self.wfile.write(b)',
        'http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()',
      ].join('\n'))
      await sidecar.commands.run('python3 /tmp/headers.py', { background: true })
      const host = sidecar.getHost(8080)
      await until('the sidecar answers', async () => {
        const r = await fetch(`https://${host}/headers`).catch((e) => e)
        return r.status === 200 ? null : String(r.status ?? r)
      })
      sbx = await Sandbox.create('debian', { ...uniq('transform'), network: { rules: { [host]: [{ transform: { headers: { 'X-Test-Token': token } } }] } } })
      const r = await sbx.commands.run(`curl -sS --max-time 20 https://${host}/headers`)
      const headers = JSON.parse(r.stdout).headers
      assert.deepEqual(headers['X-Test-Token'], [token], r.stdout)
    } finally {
      await sbx?.kill()
      await sidecar.kill()
    }
  })

  test('Secret API with E2B_DOMAIN only: create, list, getInfo, destroy; the value in no answer', async () => {
    const name = `dropin-${randomBytes(4).toString('hex')}`
    const value = `v-${randomBytes(12).toString('hex')}`
    const created = await Secret.create(name, value)
    assert.ok(!JSON.stringify(created).includes(value))
    const listed = await Secret.list().nextItems()
    assert.ok(listed.some((s) => s.name === name))
    assert.ok(!JSON.stringify(listed).includes(value))
    const info = await Secret.getInfo(name)
    assert.equal(info.name, name)
    assert.ok(!JSON.stringify(info).includes(value))
    assert.equal(await Secret.destroy(name), true)
  })

  test('watchDir: a rewrite of a watched file is one WRITE of it; recursive; entry info', async () => {
    const sbx = await Sandbox.create(uniq('watch'))
    try {
      await sbx.files.makeDir('/tmp/w/sub')
      await sbx.files.write('/tmp/w/a.txt', 'one')
      const events = []
      const handle = await sbx.files.watchDir('/tmp/w', (e) => { events.push(e) }, { recursive: true, includeEntry: true })
      await sbx.files.write('/tmp/w/a.txt', 'two')
      await sbx.files.write('/tmp/w/sub/b.txt', 'three')
      await until('a WRITE of sub/b.txt', async () =>
        events.some((e) => e.name === 'sub/b.txt' && e.type === FilesystemEventType.WRITE) ? null : JSON.stringify(events.map((e) => [e.name, e.type])))
      await handle.stop()
      const seen = events.map((e) => `${e.name}:${e.type}`)
      assert.deepEqual([...new Set(events.map((e) => e.name))].sort(), ['a.txt', 'sub/b.txt'], seen.join(' '))
      assert.equal(seen.filter((s) => s === 'a.txt:write').length, 1, seen.join(' '))
      assert.ok(!seen.includes('a.txt:create'), seen.join(' '))
      assert.ok(seen.includes('sub/b.txt:create'), seen.join(' '))
      const w = events.find((e) => e.name === 'a.txt' && e.type === FilesystemEventType.WRITE)
      assert.equal(w.entry?.path, '/tmp/w/a.txt')
      assert.equal(w.entry?.name, 'a.txt')
      assert.equal(w.entry?.size, 3)
    } finally {
      await sbx.kill()
    }
  })

  test('getHost(port) answers before a pause and wakes a paused autoResume sandbox', async () => {
    const sbx = await Sandbox.create({ ...uniq('gethost'), lifecycle: { onTimeout: 'pause', autoResume: true } })
    try {
      await serve(sbx, 8000, 'awake')
      assert.deepEqual(await page(sbx, 8000), { status: 200, body: 'awake' })
      await sbx.pause()
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
      const res = await fetch(`https://${sbx.getHost(8000)}/`)
      assert.equal(res.status, 200)
      assert.equal(await res.text(), 'awake')
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
    } finally {
      await sbx.kill()
    }
  })

  test('an envd call to a paused autoResume sandbox wakes it', async () => {
    const sbx = await Sandbox.create({ ...uniq('envdwake'), timeoutMs: 4_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    try {
      await sbx.files.write('/home/user/kept.txt', 'auto')
      await waitState(sbx.sandboxId, 'paused')
      assert.equal(await sbx.files.read('/home/user/kept.txt'), 'auto')
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
    } finally {
      await sbx.kill()
    }
  })

  for (const [name, keepMemory] of [['memory', true], ['filesystem', false]]) {
    test(`${name} pause: isRunning is false, then Sandbox.connect() and sbx.connect() bring envd back`, async () => {
      const sbx = await Sandbox.create(uniq(name))
      try {
        await sbx.files.write('/home/user/kept.txt', name)
        await serve(sbx, 8000, 'before')
        await page(sbx, 8000)
        const before = await bootMarker(sbx)
        assert.equal(await sbx.pause({ keepMemory }), true)
        assert.equal(await sbx.isRunning(), false)
        const back = await Sandbox.connect(sbx.sandboxId)
        await envdWorks(back, '/home/user/kept.txt', name)
        await envdWorks(sbx, '/home/user/kept.txt', name)
        assert.equal(await bootMarker(sbx) === before, keepMemory, 'a memory pause keeps the processes, a filesystem pause boots anew')
        if (keepMemory) assert.deepEqual(await page(sbx, 8000), { status: 200, body: 'before' })
        await serve(sbx, 8001, 'after')
        assert.deepEqual(await page(sbx, 8001), { status: 200, body: 'after' })

        assert.equal(await sbx.pause({ keepMemory }), true)
        assert.equal(await sbx.isRunning(), false)
        await sbx.connect()
        await envdWorks(sbx, '/home/user/kept.txt', name)
      } finally {
        await sbx.kill()
      }
    })
  }

  test('auto-pause without autoResume: isRunning is false until connect()', async () => {
    const sbx = await Sandbox.create({ ...uniq('autopause'), timeoutMs: 4_000, lifecycle: { onTimeout: 'pause' } })
    try {
      await sbx.files.write('/home/user/kept.txt', 'timeout')
      await waitState(sbx.sandboxId, 'paused')
      assert.equal(await sbx.isRunning(), false)
      await Sandbox.connect(sbx.sandboxId)
      await envdWorks(sbx, '/home/user/kept.txt', 'timeout')
    } finally {
      await sbx.kill()
    }
  })

  test('a daemon restart keeps envd and getHost working, running and paused', async () => {
    const running = await Sandbox.create(uniq('restart-running'))
    const paused = await Sandbox.create(uniq('restart-paused'))
    try {
      await running.files.write('/home/user/kept.txt', 'running')
      await serve(running, 8000, 'survives')
      await page(running, 8000)
      await paused.files.write('/home/user/kept.txt', 'paused')
      await paused.pause()
      await restartDaemon()
      await envdWorks(running, '/home/user/kept.txt', 'running')
      assert.deepEqual(await page(running, 8000), { status: 200, body: 'survives' })
      assert.equal(await paused.isRunning(), false)
      await Sandbox.connect(paused.sandboxId)
      await envdWorks(paused, '/home/user/kept.txt', 'paused')
    } finally {
      await running.kill()
      await paused.kill()
    }
  })

  test('network.maskRequestHost is the Host header the sandbox\'s servers see', async () => {
    const sbx = await Sandbox.create({ ...uniq('mask'), network: { maskRequestHost: 'app-${PORT}.internal.test' } })
    try {
      // A CGI script answers the Host header it was given.
      await sbx.commands.run(`mkdir -p /tmp/wh/cgi-bin && printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\nprintf %%s "$HTTP_HOST"\\n' > /tmp/wh/cgi-bin/host && chmod +x /tmp/wh/cgi-bin/host && httpd -p 8002 -h /tmp/wh`)
      let got
      await until('the CGI answer', async () => {
        const res = await fetch(`https://${sbx.getHost(8002)}/cgi-bin/host`)
        got = { status: res.status, body: await res.text() }
        return got.status === 200 ? null : JSON.stringify(got)
      })
      assert.equal(got.body, 'app-8002.internal.test')
      assert.equal((await sbx.getInfo()).network?.maskRequestHost, 'app-${PORT}.internal.test')
    } finally {
      await sbx.kill()
    }
  })

  test('kill() during commands.run rejects the command with the SDK\'s TimeoutError', async () => {
    const sbx = await Sandbox.create(uniq('kill'))
    const running = sbx.commands.run('sleep 60').then(() => null, (err) => err)
    await until('sleep running', async () => {
      const r = await sbx.commands.run('ps -o comm', { user: 'root' })
      return /^sleep$/m.test(r.stdout) ? null : r.stdout
    })
    assert.equal(await sbx.kill(), true)
    const err = await running
    assert.ok(err instanceof SandboxError, `not an SDK error: ${err}`)
    const health = await fetch(`https://${sbx.getHost(49983)}/health`).then(async (r) => `${r.status} ${await r.text()}`, (e) => `${e}`)
    assert.ok(err instanceof TimeoutError, `${err?.name}: ${err?.message} (/health now: ${health})`)
    assert.equal(await sbx.isRunning(), false)
  })
}
