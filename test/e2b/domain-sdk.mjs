// Drives the official SDK configured the way self-hosted E2B is, with only
// E2B_DOMAIN and E2B_API_KEY: the SDK finds its control plane at
// https://api.<domain> and every sandbox at https://<port>-<id>.<domain>,
// all served by the daemon's builtin proxy with --tls internal. The Go test
// TestBuiltinTLSE2BDomain starts the daemon, trusts its CA through
// NODE_EXTRA_CA_CERTS and runs this script; it prints one JSON line.
//
// Names under the test domain resolve to loopback in this process only: the
// hook below answers node's resolver for them, as a wildcard DNS record
// would, without touching the machine's resolver.

import dns from 'node:dns'

const domain = process.env.E2B_DOMAIN
if (!domain || !process.env.E2B_API_KEY || process.env.E2B_API_URL || process.env.E2B_SANDBOX_URL) {
  console.error('want E2B_DOMAIN and E2B_API_KEY only')
  process.exit(2)
}
const bare = domain.replace(/:\d+$/, '')
const resolved = new Set()
const lookup = dns.lookup
dns.lookup = function (hostname, options, callback) {
  if (typeof options === 'function') {
    callback = options
    options = {}
  }
  const host = String(hostname).toLowerCase()
  if (host === bare || host.endsWith(`.${bare}`)) {
    resolved.add(host)
    if (options && options.all) {
      process.nextTick(callback, null, [{ address: '127.0.0.1', family: 4 }])
    } else {
      process.nextTick(callback, null, '127.0.0.1', 4)
    }
    return
  }
  return lookup.call(dns, hostname, options, callback)
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// fetchPage GETs url until it answers want (the server in the sandbox takes
// a moment to start), and returns the last answer.
async function fetchPage(url, headers, want) {
  let last
  for (let i = 0; i < 100; i++) {
    try {
      const res = await fetch(url, { headers })
      last = { status: res.status, body: await res.text() }
      if (last.status === want) return last
    } catch (err) {
      last = { error: `${err} ${err.cause ?? ''}` }
    }
    await sleep(150)
  }
  return last
}

const serve = (sbx, page) => sbx.commands.run(`mkdir -p /tmp/www && printf '%s' '${page}' > /tmp/www/index.html && httpd -p 8000 -h /tmp/www`)

const { Sandbox } = await import('e2b')
const out = {}
const sbx = await Sandbox.create()
try {
  out.sandboxId = sbx.sandboxId
  out.sandboxDomain = sbx.sandboxDomain
  const res = await sbx.commands.run('echo hello from $(hostname)')
  out.stdout = res.stdout
  out.exitCode = res.exitCode
  await sbx.files.write('/tmp/note.txt', 'written over https')
  out.file = await sbx.files.read('/tmp/note.txt')
  await serve(sbx, 'public page')
  out.host = sbx.getHost(8000)
  out.public = await fetchPage(`https://${out.host}/`, {}, 200)
  out.listed = (await Sandbox.list().nextItems()).some((s) => s.sandboxId === sbx.sandboxId)
} finally {
  await sbx.kill()
}

const priv = await Sandbox.create({ network: { allowPublicTraffic: false } })
try {
  await serve(priv, 'private page')
  const url = `https://${priv.getHost(8000)}/`
  out.privateWith = await fetchPage(url, { 'e2b-traffic-access-token': priv.trafficAccessToken }, 200)
  out.privateWithout = await fetchPage(url, {}, 403)
} finally {
  await priv.kill()
}
out.resolved = [...resolved]
console.log(JSON.stringify(out))
