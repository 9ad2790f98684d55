// Pause modes, auto-pause and auto-resume through the official, unmodified
// `e2b` SDK: pause({ keepMemory: false }) keeps only the filesystem and the
// next connect() boots the sandbox anew; lifecycle.onTimeout 'pause' pauses
// at the deadline instead of killing; with autoResume a request to the
// sandbox's server through getHost(port) wakes it and is answered, without
// it only connect() does.
//
// The boot marker is the start time of the sandbox's process 1 (field 22 of
// /proc/1/stat): it changes exactly when the container starts again. The
// kernel's boot_id would not do: under runc every container shares the
// host's.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { randomBytes } from 'node:crypto'
import { Sandbox } from 'e2b'
import { setup, teardown, startDaemon, sleep, runId } from './helpers.mjs'

const T = 180_000
const uniq = (tag) => ({ test: `${tag}-${randomBytes(4).toString('hex')}`, run: runId })

let main

before(async () => {
  await setup()
  main = await startDaemon({ name: 'lifecycle' })
})

after(async () => {
  await teardown()
})

// getVia fetches http://<host>/ through the daemon's proxy listener with host
// as the Host header, as a resolving client would.
function getVia(proxyPort, host) {
  return new Promise((resolveGet, reject) => {
    const req = request({ host: '127.0.0.1', port: proxyPort, path: '/', headers: { Host: host } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { body += c })
      res.on('end', () => resolveGet({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

async function bootMarker(sbx) {
  const r = await sbx.commands.run("cut -d' ' -f22 /proc/1/stat")
  return r.stdout.trim()
}

async function serve(sbx, port, page) {
  await sbx.commands.run(`mkdir -p /tmp/www && printf '%s' '${page}' > /tmp/www/index.html && httpd -p ${port} -h /tmp/www`)
}

async function until(what, check, ms = 30_000) {
  const deadline = Date.now() + ms
  for (;;) {
    const err = await check()
    if (!err) return
    if (Date.now() > deadline) throw new Error(`${what}: ${err}`)
    await sleep(200)
  }
}

const waitPaused = (id) => until(`sandbox ${id} paused`, async () => {
  const info = await Sandbox.getInfo(id, main.opts)
  return info.state === 'paused' ? null : `state ${info.state}`
})

describe('pause modes', () => {
  test('pause({ keepMemory: false }) then connect() reboots with files kept', async () => {
    const sbx = await Sandbox.create({ ...main.opts, metadata: uniq('fspause') })
    try {
      await sbx.files.write('/home/user/kept.txt', 'still here')
      const before = await bootMarker(sbx)
      await sbx.pause({ keepMemory: false })
      const info = await Sandbox.getInfo(sbx.sandboxId, main.opts)
      assert.equal(info.state, 'paused')
      const back = await Sandbox.connect(sbx.sandboxId, main.opts)
      assert.equal(await back.files.read('/home/user/kept.txt'), 'still here')
      assert.notEqual(await bootMarker(back), before, 'the sandbox booted anew')
      assert.equal((await Sandbox.getInfo(sbx.sandboxId, main.opts)).state, 'running')
    } finally {
      await sbx.kill()
    }
  })

  test('a memory pause resumes without a reboot', async () => {
    const sbx = await Sandbox.create({ ...main.opts, metadata: uniq('mempause') })
    try {
      const before = await bootMarker(sbx)
      await sbx.pause()
      const back = await Sandbox.connect(sbx.sandboxId, main.opts)
      assert.equal(await bootMarker(back), before)
    } finally {
      await sbx.kill()
    }
  })
})

describe('connect onResume', () => {
  test("connect({ onResume: 'reboot' }) cold-starts a memory-paused sandbox", async () => {
    const sbx = await Sandbox.create({ ...main.opts, metadata: uniq('reboot') })
    try {
      await sbx.files.write('/home/user/kept.txt', 'through a reboot')
      const before = await bootMarker(sbx)
      await sbx.pause()
      const back = await Sandbox.connect(sbx.sandboxId, { ...main.opts, onResume: 'reboot' })
      assert.notEqual(await bootMarker(back), before)
      assert.equal(await back.files.read('/home/user/kept.txt'), 'through a reboot')
    } finally {
      await sbx.kill()
    }
  })
})

// Each sandbox's deadline is brought near (setTimeout) only once the test
// has set it up: under load, a 4 s deadline from the create passed before
// the set-up did.
describe('lifecycle', () => {
  test("onTimeout 'pause' with autoResume: traffic through getHost wakes the sandbox", async () => {
    const sbx = await Sandbox.create({
      ...main.opts, metadata: uniq('autoresume'), timeoutMs: 120_000,
      lifecycle: { onTimeout: 'pause', autoResume: true },
    })
    try {
      await serve(sbx, 8000, 'awake')
      const info = await Sandbox.getInfo(sbx.sandboxId, main.opts)
      assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
      await sbx.setTimeout(2_000)
      await waitPaused(sbx.sandboxId)
      const r = await getVia(main.proxyPort, sbx.getHost(8000))
      assert.equal(r.status, 200, r.body)
      assert.equal(r.body, 'awake')
      assert.equal((await Sandbox.getInfo(sbx.sandboxId, main.opts)).state, 'running')
    } finally {
      await sbx.kill()
    }
  })

  test('autoResume: an SDK call through the gateway wakes the sandbox', async () => {
    const sbx = await Sandbox.create({
      ...main.opts, metadata: uniq('gatewaywake'), timeoutMs: 120_000,
      lifecycle: { onTimeout: 'pause', autoResume: true },
    })
    try {
      await sbx.files.write('/home/user/kept.txt', 'via the gateway')
      await sbx.setTimeout(2_000)
      await waitPaused(sbx.sandboxId)
      // The SDK object made before the pause calls the agent through
      // E2B_SANDBOX_URL (the daemon's /e2b/envd gateway).
      assert.equal(await sbx.files.read('/home/user/kept.txt'), 'via the gateway')
      assert.equal((await Sandbox.getInfo(sbx.sandboxId, main.opts)).state, 'running')
    } finally {
      await sbx.kill()
    }
  })

  test("onTimeout 'pause' without autoResume: only connect() wakes it", async () => {
    const sbx = await Sandbox.create({
      ...main.opts, metadata: uniq('noautoresume'), timeoutMs: 120_000,
      lifecycle: { onTimeout: 'pause' },
    })
    try {
      await serve(sbx, 8000, 'woken by connect')
      await sbx.setTimeout(2_000)
      await waitPaused(sbx.sandboxId)
      const r = await getVia(main.proxyPort, sbx.getHost(8000))
      assert.notEqual(r.status, 200)
      assert.equal((await Sandbox.getInfo(sbx.sandboxId, main.opts)).state, 'paused')
      await Sandbox.connect(sbx.sandboxId, main.opts)
      await until('the server after connect', async () => {
        const r = await getVia(main.proxyPort, sbx.getHost(8000))
        return r.status === 200 && r.body === 'woken by connect' ? null : `${r.status} ${r.body}`
      }, 15_000)
    } finally {
      await sbx.kill()
    }
  })

  test("onTimeout { action: 'pause', keepMemory: false } pauses the filesystem", async () => {
    const sbx = await Sandbox.create({
      ...main.opts, metadata: uniq('fsauto'), timeoutMs: 120_000,
      lifecycle: { onTimeout: { action: 'pause', keepMemory: false } },
    })
    try {
      await sbx.files.write('/home/user/kept.txt', 'kept at the deadline')
      const before = await bootMarker(sbx)
      await sbx.setTimeout(2_000)
      await waitPaused(sbx.sandboxId)
      const back = await Sandbox.connect(sbx.sandboxId, main.opts)
      assert.equal(await back.files.read('/home/user/kept.txt'), 'kept at the deadline')
      assert.notEqual(await bootMarker(back), before)
    } finally {
      await sbx.kill()
    }
  })
})
