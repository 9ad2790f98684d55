// The drop-in configuration of the E2B SDK tests: the daemon runs with
// --tls internal on its builtin router, and the SDK is given E2B_DOMAIN and
// E2B_API_KEY alone, as E2B's documentation tells self-hosters, with the
// daemon's CA trusted through NODE_EXTRA_CA_CERTS. No debug URL
// (E2B_API_URL, E2B_SANDBOX_URL) is set: the SDK finds the API at
// https://api.<domain> and every sandbox at https://<port>-<id>.<domain>.
//
// NODE_EXTRA_CA_CERTS is read once, when node starts, and the CA exists only
// once the daemon has started; so a drop-in test file runs twice. Under
// `node --test` it is the parent: runDropIn starts the daemon and runs the
// same file again as a child with the environment above, whose tests are
// the real ones. The child asks the parent to restart the daemon over IPC,
// since the parent owns the daemon's process.
//
// Names under the test domain resolve to loopback in the child only: the
// hook below answers node's resolver for them, as a wildcard DNS record
// would, without touching the machine's resolver.

import { spawn } from 'node:child_process'
import dns from 'node:dns'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { setup, teardown, startDaemon } from './helpers.mjs'

export const dropInDomain = 'sandpit.test'
export const baseImage = process.env.SANDPIT_BASE_IMAGE_REF || 'sandpit/base:latest'
export const isChild = process.env.SANDPIT_DROPIN_CHILD === '1'

// runDropIn is the parent's side: it starts a daemon in the drop-in
// configuration, runs file as the child against it and resolves with the
// child's exit code and output.
export async function runDropIn(file) {
  await setup()
  try {
    // The realistic image (curl, python3) is the template `debian`, for
    // the tests that need a real client or server inside a sandbox.
    const d = await startDaemon({ name: 'dropin', args: ['--tls', 'internal', '--domain', dropInDomain, '--template', `debian=${baseImage}`] })
    const env = { ...process.env }
    for (const k of Object.keys(env)) if (k.startsWith('E2B_') || k.startsWith('NODE_TEST')) delete env[k]
    Object.assign(env, {
      E2B_DOMAIN: `${dropInDomain}:${d.proxyPort}`,
      E2B_API_KEY: d.token,
      NODE_EXTRA_CA_CERTS: join(d.dataDir, 'tls', 'ca.crt'),
      SANDPIT_DROPIN_CHILD: '1',
    })
    const child = spawn(process.execPath, ['--test-reporter=spec', file], { env, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] })
    let output = ''
    child.stdout.on('data', (b) => { output += b })
    child.stderr.on('data', (b) => { output += b })
    child.on('message', async (msg) => {
      if (msg?.op !== 'restart') return
      try {
        await d.restart()
        child.send({ op: 'restarted' })
      } catch (err) {
        child.send({ op: 'restarted', error: String(err) })
      }
    })
    const code = await new Promise((r) => child.on('exit', (c, sig) => r(c ?? sig)))
    return { code, output, log: d.log }
  } finally {
    await teardown()
  }
}

// dropInSuite is a drop-in test file's body: in the parent, one test that
// runs the file as the child (see runDropIn); in the child, the suite of
// cases, all of them within timeoutMs.
export function dropInSuite(fileUrl, title, timeoutMs, cases) {
  if (!isChild) {
    test(`${title} in the drop-in configuration (E2B_DOMAIN only, --tls internal)`, { timeout: 1_800_000 }, async (t) => {
      const r = await runDropIn(fileURLToPath(fileUrl))
      t.diagnostic(r.output)
      assert.equal(r.code, 0, `${r.output}\n--- daemon log (tail) ---\n${r.log.slice(-12000)}`)
    })
  } else {
    describe('drop-in', { timeout: timeoutMs }, () => { cases() })
  }
}

// restartDaemon is the child's side of a daemon restart: the parent stops
// the daemon and starts it again on the same data directory and ports.
export function restartDaemon() {
  return new Promise((resolve, reject) => {
    const onMessage = (msg) => {
      if (msg?.op !== 'restarted') return
      process.off('message', onMessage)
      if (msg.error) reject(new Error(msg.error))
      else resolve()
    }
    process.on('message', onMessage)
    process.send({ op: 'restart' })
  })
}

if (isChild) {
  const bare = dropInDomain
  const lookup = dns.lookup
  dns.lookup = function (hostname, options, callback) {
    if (typeof options === 'function') {
      callback = options
      options = {}
    }
    const host = String(hostname).toLowerCase()
    if (host === bare || host.endsWith(`.${bare}`)) {
      if (options && options.all) process.nextTick(callback, null, [{ address: '127.0.0.1', family: 4 }])
      else process.nextTick(callback, null, '127.0.0.1', 4)
      return
    }
    return lookup.call(dns, hostname, options, callback)
  }
}
