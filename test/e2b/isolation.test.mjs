// Ports, public traffic and OCI runtimes through the official, unmodified
// `e2b` SDK: an E2B sandbox's servers answer at sbx.getHost(port) through the
// daemon's preview proxy; with network.allowPublicTraffic false they answer
// only to requests carrying the sandbox's traffic token; and the SDK's
// commands work in a sandbox running under gVisor's runsc.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { request } from 'node:http'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { randomBytes } from 'node:crypto'
import { Sandbox } from 'e2b'
import { setup, teardown, startDaemon, sleep, runId } from './helpers.mjs'

const T = 120_000
const run = promisify(execFile)
const uniq = (tag) => ({ test: `${tag}-${randomBytes(4).toString('hex')}`, run: runId })

let main

before(async () => {
  await setup()
  main = await startDaemon({ name: 'isolation' })
})

after(async () => {
  await teardown()
})

// getVia fetches http://<host>/ through the daemon's proxy listener, with
// host as the Host header: *.localhost does not resolve on every machine,
// and this is exactly what a resolving client would send.
function getVia(proxyPort, host, headers = {}) {
  return new Promise((resolveGet, reject) => {
    const req = request({ host: '127.0.0.1', port: proxyPort, path: '/', headers: { Host: host, ...headers } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { body += c })
      res.on('end', () => resolveGet({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

async function serve(sbx, port, page) {
  await sbx.commands.run(`mkdir -p /tmp/www && printf '%s' '${page}' > /tmp/www/index.html && httpd -p ${port} -h /tmp/www`)
}

// echoHeaders is the header-echo server of test/testdata, for busybox nc
// -e: the sandbox's server answers with the headers it received.
const echoHeaders = readFileSync(new URL('../testdata/echo-headers.sh', import.meta.url), 'utf8')

async function eventually(what, check) {
  const deadline = Date.now() + 15_000
  for (;;) {
    const err = await check()
    if (!err) return
    if (Date.now() > deadline) throw new Error(`${what}: ${err}`)
    await sleep(100)
  }
}

describe('ports', () => {
  test('a server on any port answers at sbx.getHost(port)', async () => {
    const sbx = await Sandbox.create({ ...main.opts, metadata: uniq('gethost') })
    try {
      await serve(sbx, 8000, 'hello from 8000')
      const host = sbx.getHost(8000)
      assert.equal(host, `8000-${sbx.sandboxId}.localhost:${main.proxyPort}`)
      await eventually('the server through the proxy', async () => {
        const r = await getVia(main.proxyPort, host)
        return r.status === 200 && r.body === 'hello from 8000' ? null : `${r.status} ${r.body}`
      })
    } finally {
      await sbx.kill()
    }
  })

  test('allowPublicTraffic false: ports answer only with the traffic token', async () => {
    const sbx = await Sandbox.create({ ...main.opts, metadata: uniq('private'), network: { allowPublicTraffic: false } })
    try {
      assert.ok(sbx.trafficAccessToken, 'the create returned a traffic token')
      await serve(sbx, 8000, 'private page')
      const host = sbx.getHost(8000)
      const token = { 'e2b-traffic-access-token': sbx.trafficAccessToken }
      await eventually('the server with the token', async () => {
        const r = await getVia(main.proxyPort, host, token)
        return r.status === 200 && r.body === 'private page' ? null : `${r.status} ${r.body}`
      })
      assert.equal((await getVia(main.proxyPort, host)).status, 403)
      assert.equal((await getVia(main.proxyPort, host, { 'e2b-traffic-access-token': 'wrong' })).status, 403)
      // The SDK's own calls reach the agent as before.
      const r = await sbx.commands.run('echo still here')
      assert.equal(r.stdout, 'still here\n')
    } finally {
      await sbx.kill()
    }
  })

  test("a sandbox's server sees neither the SDK's API key nor the traffic token", async () => {
    const sbx = await Sandbox.create({ ...main.opts, metadata: uniq('nocreds'), network: { allowPublicTraffic: false } })
    try {
      await sbx.files.write('/tmp/echo.sh', echoHeaders)
      await sbx.commands.run('chmod +x /tmp/echo.sh && (nc -ll -p 8000 -e /tmp/echo.sh </dev/null >/dev/null 2>&1 &)')
      const headers = {
        'e2b-traffic-access-token': sbx.trafficAccessToken,
        'X-API-Key': main.opts.apiKey,
        Authorization: `Bearer ${main.opts.apiKey}`,
        'X-App': 'kept',
      }
      let r
      await eventually('the echo server through the proxy', async () => {
        r = await getVia(main.proxyPort, sbx.getHost(8000), headers)
        return r.status === 200 ? null : `${r.status} ${r.body}`
      })
      const seen = r.body.toLowerCase()
      assert.match(seen, /x-app: kept/, 'the request\'s own headers pass')
      for (const leak of [main.opts.apiKey, sbx.trafficAccessToken, 'e2b-traffic-access-token', 'x-api-key', 'authorization:', 'sandpit-']) {
        assert.ok(!seen.includes(leak.toLowerCase()), `the sandbox's server saw ${leak}:\n${r.body}`)
      }
    } finally {
      await sbx.kill()
    }
  })
})

async function hasRuntime(name) {
  try {
    const { stdout } = await run('docker', ['info', '--format', '{{json .Runtimes}}'])
    return name in JSON.parse(stdout)
  } catch {
    return false
  }
}

describe('gVisor', () => {
  test('commands.run in a sandbox under runsc', async (t) => {
    if (!(await hasRuntime('runsc'))) {
      if (process.env.CI === 'true') assert.fail('runsc is not registered with Docker in CI (scripts/ensure-runsc.sh)')
      t.skip('runsc is not registered with Docker (scripts/ensure-runsc.sh)')
      return
    }
    const d = await startDaemon({ name: 'runsc', args: ['--oci-runtime', 'runsc'] })
    const sbx = await Sandbox.create({ ...d.opts, metadata: uniq('runsc') })
    try {
      const { stdout: rt } = await run('docker', ['inspect', '--format', '{{.HostConfig.Runtime}}', `sandpit-${sbx.sandboxId}`])
      assert.equal(rt.trim(), 'runsc')
      const r = await sbx.commands.run('echo hello; echo oops >&2')
      assert.equal(r.stdout, 'hello\n')
      assert.equal(r.stderr, 'oops\n')
      assert.equal(r.exitCode, 0)
      await sbx.files.write('/tmp/x.txt', 'under gvisor')
      assert.equal(await sbx.files.read('/tmp/x.txt'), 'under gvisor')
    } finally {
      await sbx.kill()
      await d.stop()
    }
  })
})
