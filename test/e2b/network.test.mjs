// Egress policy through the official E2B SDK: allowInternetAccess and
// network.allowOut / network.denyOut are honoured by the daemon's firewall.
// "The internet" and "the LAN" are addresses in a network namespace this
// test makes itself (joined to the host by a veth pair and routed from it),
// so nothing leaves the machine.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { randomBytes } from 'node:crypto'
import { lookup } from 'node:dns/promises'
import { Sandbox, ALL_TRAFFIC, CommandExitError } from 'e2b'
import { setup, teardown, startDaemon, runId } from './helpers.mjs'

const run = promisify(execFile)
const T = 120_000

// Addresses the machine really uses (on some machines the package mirrors
// live in TEST-NET-3 too) must not be captured by the test's route.
const inUse = new Set()
for (const h of ['deb.debian.org', 'proxy.golang.org', 'registry.npmjs.org']) {
  try {
    for (const { address } of await lookup(h, { all: true })) inUse.add(address)
  } catch {}
}
const tag = randomBytes(3).toString('hex')
let r
do r = 1 + randomBytes(1)[0] % 250
while (inUse.has(`203.0.113.${r}`))
const fake = {
  ns: `spe2b-${tag}`,
  hostVeth: `speh${tag}`,
  nsVeth: `spen${tag}`,
  link: `10.252.${r}.`,
  internet: `203.0.113.${r}`,
  lan: `10.253.${r}.10`,
  lanCIDR: `10.253.${r}.0/24`,
  port: 20000 + (randomBytes(2).readUInt16BE() % 10000),
}
let listener
let main

async function ip(...args) {
  await run('ip', args)
}

async function fakeNetUp() {
  await ip('netns', 'add', fake.ns)
  await ip('link', 'add', fake.hostVeth, 'type', 'veth', 'peer', 'name', fake.nsVeth)
  await ip('link', 'set', fake.nsVeth, 'netns', fake.ns)
  await ip('addr', 'add', `${fake.link}1/30`, 'dev', fake.hostVeth)
  await ip('link', 'set', fake.hostVeth, 'up')
  for (const a of [`${fake.link}2/30`, `${fake.internet}/32`, `${fake.lan}/32`]) {
    await ip('-n', fake.ns, 'addr', 'add', a, 'dev', fake.nsVeth)
  }
  await ip('-n', fake.ns, 'link', 'set', fake.nsVeth, 'up')
  await ip('-n', fake.ns, 'link', 'set', 'lo', 'up')
  for (const a of [fake.internet, fake.lan]) {
    await ip('route', 'add', `${a}/32`, 'via', `${fake.link}2`, 'dev', fake.hostVeth)
  }
  // One node process inside the namespace greets on both addresses.
  const src = `
    const net = require('node:net')
    let n = 0
    for (const a of ${JSON.stringify([fake.internet, fake.lan])}) {
      net.createServer((s) => s.end('hello from ' + a + '\\n')).listen(${fake.port}, a, () => {
        if (++n === 2) console.log('ready')
      })
    }`
  listener = spawn('ip', ['netns', 'exec', fake.ns, process.execPath, '-e', src], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise((resolve, reject) => {
    listener.stdout.once('data', resolve)
    listener.once('exit', (code) => reject(new Error(`listener exited with ${code}`)))
  })
}

async function fakeNetDown() {
  listener?.kill('SIGKILL')
  await run('ip', ['link', 'del', fake.hostVeth]).catch(() => {})
  await run('ip', ['netns', 'del', fake.ns]).catch(() => {})
}

before(async () => {
  await setup()
  await fakeNetUp()
  main = await startDaemon({ name: 'net' })
})

after(async () => {
  await teardown()
  await fakeNetDown()
})

// reaches runs nc in the sandbox and reports whether addr's greeting came.
async function reaches(sbx, addr) {
  try {
    const res = await sbx.commands.run(`nc -w 3 ${addr} ${fake.port} </dev/null`, { timeoutMs: 20_000 })
    return res.stdout === `hello from ${addr}\n`
  } catch (err) {
    if (err instanceof CommandExitError) return false
    throw err
  }
}

async function rules() {
  const { stdout } = await run('iptables', ['-S'])
  return stdout
}

describe('egress policy through the E2B SDK', () => {
  const cases = [
    { name: 'default', opts: {}, internet: true, lan: false },
    { name: 'allowInternetAccess: false', opts: { allowInternetAccess: false }, internet: false, lan: false },
    { name: 'denyOut the internet', opts: { network: { denyOut: ['203.0.113.0/24'] } }, internet: false, lan: false },
    { name: 'allowOut the LAN', opts: { network: { allowOut: [fake.lanCIDR] } }, internet: true, lan: true },
    { name: 'denyOut all but allowOut one address', opts: { network: { denyOut: [ALL_TRAFFIC], allowOut: [fake.internet] } }, internet: true, lan: false },
  ]
  for (const c of cases) {
    test(c.name, async () => {
      const sbx = await Sandbox.create({ ...main.opts, ...c.opts, metadata: { test: c.name, run: runId } })
      try {
        assert.equal(await reaches(sbx, fake.internet), c.internet, 'the internet')
        assert.equal(await reaches(sbx, fake.lan), c.lan, 'the LAN')
      } finally {
        await sbx.kill()
      }
      assert.ok(!(await rules()).includes(`sandpit:${sbx.sandboxId}`), 'rules remain after kill')
    })
  }

  test('a malformed name in allowOut is refused, not ignored', async () => {
    for (const allowOut of [['not a name!'], ['*.com']]) {
      await assert.rejects(
        Sandbox.create({ ...main.opts, network: { denyOut: [ALL_TRAFFIC], allowOut }, metadata: { run: runId } }),
        /400|domain/i,
      )
    }
  })
})
