// Drives the official e2b SDK through a secret injected at the egress proxy.
// The Go test TestSecretInjectedAtEgressE2B owns the "internet" (web servers
// on TEST-NET addresses in a network namespace, their CA, and the DNS server
// the daemon asks) and checks what the servers received; this script prints
// one JSON line.
//
// VALUE is the secret's value, which the script gives to Secret.create and
// nothing else; PROBE is the host path of the static probe program.
import { readFile } from 'node:fs/promises'
import { Sandbox, Secret } from 'e2b'

const opts = { apiKey: process.env.SANDPIT_TOKEN, apiUrl: process.env.SANDPIT_URL + '/e2b', sandboxUrl: process.env.SANDPIT_URL + '/e2b/envd' }
const out = {}

async function run(sbx, cmd) {
  try {
    const r = await sbx.commands.run(cmd, { timeoutMs: 60_000 })
    return { ok: true, out: r.stdout.trim() }
  } catch (err) {
    return { ok: false, out: String(err.stdout ?? err.message).trim() }
  }
}

await Secret.create('upstream-key', process.env.VALUE, opts)
const sbx = await Sandbox.create({
  ...opts,
  network: {
    allowOut: ({ rules }) => [...rules.keys()],
    denyOut: ({ allTraffic }) => [allTraffic],
    rules: {
      'allowed.test': [{ transform: { headers: { 'X-Api-Key': Secret.fill('upstream-key'), 'X-Static': 'static-value' } } }],
    },
  },
})
try {
  await sbx.files.write('/tmp/egress-probe', new Blob([await readFile(process.env.PROBE)]))
  await sbx.commands.run('chmod +x /tmp/egress-probe')
  out.info = (await sbx.getInfo()).network ?? null
  out.https = await run(sbx, '/tmp/egress-probe hget https://allowed.test/headers X-Api-Key sandbox-typed')
  out.env = await run(sbx, 'env')
  out.list = await Secret.list(opts).nextItems()
  // Rules cleared by an update that leaves them out: the next request
  // carries what the sandbox sent.
  await sbx.updateNetwork({ allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'] })
  out.cleared = await run(sbx, '/tmp/egress-probe hget http://allowed.test/headers X-Api-Key sandbox-typed')
  out.sandboxId = sbx.sandboxId
} finally {
  await sbx.kill()
}
console.log(JSON.stringify(out))
