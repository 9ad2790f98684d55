// Drives the official e2b SDK through domain rules on egress. The Go test
// TestEgressByNameSDKs owns the "internet" (a network namespace with web
// servers on TEST-NET addresses, a test CA and a DNS server the daemon asks)
// and runs this script against its daemon; the script prints one JSON line.
//
// PROBE and CA are host paths of a static probe program and the test CA,
// copied into the sandbox; INTERNET is the address allowed.test resolves to.
import { readFile } from 'node:fs/promises'
import { Sandbox, ALL_TRAFFIC } from 'e2b'

const opts = { apiKey: process.env.SANDPIT_TOKEN, apiUrl: process.env.SANDPIT_URL + '/e2b', sandboxUrl: process.env.SANDPIT_URL + '/e2b/envd' }
const out = {}

// run runs the probe and reports success and its output line; a probe
// that fails exits 1, which the SDK raises as CommandExitError.
async function run(sbx, args) {
  try {
    const r = await sbx.commands.run(`/tmp/egress-probe ${args}`, { timeoutMs: 30_000 })
    return { ok: true, out: r.stdout.trim() }
  } catch (err) {
    return { ok: false, out: String(err.stdout ?? err.message).trim() }
  }
}

const sbx = await Sandbox.create({ ...opts, network: { allowOut: ['allowed.test'], denyOut: [ALL_TRAFFIC] } })
try {
  await sbx.files.write('/tmp/egress-probe', new Blob([await readFile(process.env.PROBE)]))
  await sbx.files.write('/tmp/egress-ca.pem', await readFile(process.env.CA, 'utf8'))
  await sbx.commands.run('chmod +x /tmp/egress-probe')
  out.createdInfo = (await sbx.getInfo()).network ?? null
  out.created = {
    allowed: await run(sbx, 'get https://allowed.test/'),
    other: await run(sbx, 'get https://other.test/'),
    ipOtherSNI: await run(sbx, `sni ${process.env.INTERNET} other.test`),
    ipNoSNI: await run(sbx, `sni ${process.env.INTERNET} ""`),
  }
  // updateNetwork replaces every rule: denyOut a name, allowOut left out
  // (cleared), internet access back on.
  await sbx.updateNetwork({ denyOut: ['allowed.test'] })
  out.deniedInfo = (await sbx.getInfo()).network ?? null
  out.denied = {
    allowed: await run(sbx, 'get https://allowed.test/'),
    other: await run(sbx, 'get https://other.test/'),
  }
  // The same update again changes nothing.
  await sbx.updateNetwork({ denyOut: ['allowed.test'] })
  out.again = { allowed: await run(sbx, 'get https://allowed.test/') }
  // Back to allow-only, through the static call.
  await Sandbox.updateNetwork(sbx.sandboxId, { allowOut: ['allowed.test'], allowInternetAccess: false }, opts)
  out.allowOnly = {
    allowed: await run(sbx, 'get https://allowed.test/'),
    other: await run(sbx, 'get https://other.test/'),
  }
  out.sandboxId = sbx.sandboxId
} finally {
  await sbx.kill()
}
console.log(JSON.stringify(out))
