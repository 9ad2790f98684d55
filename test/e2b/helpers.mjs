// Helpers of the E2B conformance tests: build the sandpit binary, run real
// daemons against the local Docker engine, and clean up everything they made.
// Every container a test daemon creates carries the label
// sandpit.run=<this run's id>, so cleanup removes exactly this run's
// containers on an engine that may hold others.

import { spawn, execFile } from 'node:child_process'
import { mkdtemp, rm, access } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { randomBytes } from 'node:crypto'

const run = promisify(execFile)

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
export const testImage = process.env.SANDPIT_TEST_IMAGE || 'sandpit/base:test'
export const runId = `e2b-${process.pid}-${randomBytes(4).toString('hex')}`

let workDir
let binary

// setup builds the daemon once per test process and makes sure the test image
// exists (the build script is idempotent and fast when the image is current).
export async function setup() {
  workDir = await mkdtemp(join(tmpdir(), 'sandpit-e2b-'))
  binary = process.env.SANDPIT_BIN || join(workDir, 'sandpit')
  if (!process.env.SANDPIT_BIN) {
    // The crash-recovery tests need the test-only crash points compiled in.
    // scripts/build.sh embeds the small agent, as an installed daemon has.
    await run('bash', ['scripts/build.sh', '-o', binary, '-tags', 'sandpit_crashpoints'], {
      cwd: repoRoot,
      env: { ...process.env, CGO_ENABLED: '0' },
      maxBuffer: 16 << 20,
    })
  }
  try {
    await run('docker', ['image', 'inspect', testImage])
  } catch {
    await run(join(repoRoot, 'scripts', 'build-test-image.sh'), [], {
      env: { ...process.env, SANDPIT_TEST_IMAGE: testImage },
      maxBuffer: 16 << 20,
    })
  }
}

const daemons = new Set()
// networks are the sandbox networks this run's daemons made; teardown
// removes them (and their firewall rules) once their containers are gone.
const networks = new Set()
export const networkPool = '10.200.0.0/14'

// teardown stops every daemon still running and removes this run's
// containers, images and files.
export async function teardown() {
  await Promise.all([...daemons].map((d) => d.stop()))
  const ids = await containers()
  if (ids.length > 0) await run('docker', ['rm', '-f', '-v', ...ids])
  // Template builds and snapshots made images that carry the run's label
  // too; they go once no container of the run uses them.
  const { stdout: imgs } = await run('docker', ['images', '-q', '--no-trunc', '--filter', `label=sandpit.run=${runId}`])
  const imageIds = [...new Set(imgs.split('\n').filter(Boolean))]
  if (imageIds.length > 0) await run('docker', ['rmi', '-f', ...imageIds])
  for (const n of networks) {
    await run(binary, ['uninstall', '--network-name', n])
    networks.delete(n)
  }
  if (workDir) await rm(workDir, { recursive: true, force: true })
}

// containers lists this run's containers (running or not), optionally only
// those of one daemon.
export async function containers(daemonName) {
  const args = ['ps', '-aq', '--filter', `label=sandpit.run=${runId}`]
  if (daemonName) args.push('--filter', `label=sandpit.test-daemon=${daemonName}`)
  const { stdout } = await run('docker', args)
  return stdout.split('\n').filter(Boolean)
}

export function freePort() {
  return new Promise((resolvePort, reject) => {
    const srv = createServer()
    srv.unref()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolvePort(port))
    })
  })
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// startDaemon runs `sandpit serve` and waits until it answers. The returned
// object keeps its data directory and ports, so restart() brings the same
// daemon back after a crash.
export async function startDaemon({ name, args = [], env = {} } = {}) {
  const dataDir = await mkdtemp(join(workDir, `${name}-`))
  const d = {
    name,
    dataDir,
    token: `tok-${name}-${randomBytes(8).toString('hex')}`,
    apiPort: await freePort(),
    proxyPort: await freePort(),
    args,
    proc: undefined,
    exited: undefined,
    log: '',
    network: `sandpit-${runId}-${name}`,
  }
  networks.add(d.network)
  // setPorts points the daemon's URLs and the SDK options at its ports.
  const setPorts = () => {
    d.apiUrl = `http://127.0.0.1:${d.apiPort}/e2b`
    d.sandboxUrl = `http://127.0.0.1:${d.apiPort}/e2b/envd`
    // opts are the SDK connection options that point it at this daemon.
    d.opts = { apiKey: d.token, apiUrl: d.apiUrl, sandboxUrl: d.sandboxUrl }
  }
  setPorts()
  d.launch = async (extraEnv = env) => {
    const proc = spawn(binary, [
      'serve',
      '--data-dir', d.dataDir,
      '--listen', `127.0.0.1:${d.apiPort}`,
      '--proxy-listen', `127.0.0.1:${d.proxyPort}`,
      '--token', d.token,
      '--default-image', testImage,
      '--container-label', `sandpit.run=${runId}`,
      '--container-label', `sandpit.test-daemon=${name}`,
      '--network-name', d.network,
      '--network-pool', networkPool,
      // A create's claim outlives the create however slow the engine is:
      // on a saturated CI machine a code interpreter create (engine start
      // plus Jupyter) took over the default two minutes, and the claim's
      // bound answered 504. The default stays for users; a suite that
      // needs another bound passes its own (the last flag wins).
      '--e2b-pending-ttl', '10m',
      ...d.args,
    ], { env: { ...process.env, ...extraEnv }, stdio: ['ignore', 'ignore', 'pipe'] })
    d.proc = proc
    d.exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })))
    proc.stderr.on('data', (b) => { d.log += b.toString() })
    daemons.add(d)
    const deadline = Date.now() + 30_000
    for (;;) {
      try {
        const res = await fetch(`http://127.0.0.1:${d.apiPort}/health`)
        if (res.ok) return
      } catch {}
      const done = await Promise.race([d.exited, sleep(100)])
      if (done) throw new Error(`daemon ${name} exited early (${JSON.stringify(done)}):\n${d.log}`)
      if (Date.now() > deadline) throw new Error(`daemon ${name} did not start:\n${d.log}`)
    }
  }
  d.stop = async () => {
    daemons.delete(d)
    if (d.proc && d.proc.exitCode === null && d.proc.signalCode === null) {
      d.proc.kill('SIGTERM')
      const stopped = await Promise.race([d.exited, sleep(15_000)])
      if (!stopped) d.proc.kill('SIGKILL')
      await d.exited
    }
  }
  d.restart = async (extraEnv = {}) => {
    await d.stop()
    await d.launch(extraEnv)
  }
  // freePort releases the port before the daemon binds it, so a suite
  // running beside this one can take it in between. The first start then
  // tries fresh ports; a restart keeps its ports, since callers hold the URLs.
  for (let attempt = 1; ; attempt++) {
    try {
      await d.launch()
      break
    } catch (err) {
      if (attempt >= 5 || !String(err.message).includes('address already in use')) throw err
      d.log += '--- port taken, retrying with other ports ---\n'
      d.apiPort = await freePort()
      d.proxyPort = await freePort()
      setPorts()
    }
  }
  return d
}

// poolStatus reads the daemon's GET /v1/pool with its admin token.
export async function poolStatus(daemon) {
  const res = await fetch(`http://127.0.0.1:${daemon.apiPort}/v1/pool`, { headers: { Authorization: `Bearer ${daemon.token}` } })
  if (res.status !== 200) throw new Error(`GET /v1/pool: ${res.status} ${await res.text()}`)
  return res.json()
}

export async function awaitPool(daemon, ready, budgetMs = 60_000) {
  const deadline = Date.now() + budgetMs
  for (;;) {
    const st = await poolStatus(daemon)
    if (st.pools[0].ready >= ready && st.pools[0].starting === 0) return st
    if (Date.now() > deadline) throw new Error(`pool not at ${ready}: ${JSON.stringify(st)}\n${daemon.log}`)
    await sleep(50)
  }
}

// adminCall calls the daemon's native API with its admin token and returns
// the decoded answer; a failure throws with the status and body.
export async function adminCall(daemon, method, path, body) {
  const res = await fetch(`http://127.0.0.1:${daemon.apiPort}${path}`, {
    method,
    headers: { Authorization: `Bearer ${daemon.token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : undefined
}
