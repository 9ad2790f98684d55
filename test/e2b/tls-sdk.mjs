// Runs one command in a new sandbox with the official SDK reaching the
// sandbox the way it does against E2B itself: E2B_DOMAIN set and no
// E2B_SANDBOX_URL, so the SDK builds https://49983-<id>.<domain> on its own
// and Caddy serves it with an on-demand certificate. The Go test
// TestCaddyPreviewTLS starts the daemon and Caddy, trusts Caddy's internal CA
// through NODE_EXTRA_CA_CERTS and runs this script; it prints one JSON line.
//
// Names under the test domain resolve to loopback in this process only: the
// hook below answers node's resolver for them, which is what a wildcard DNS
// record would do, without touching the machine's resolver.

import dns from 'node:dns'

const domain = process.env.E2B_DOMAIN
if (!domain || process.env.E2B_SANDBOX_URL) {
  console.error('want E2B_DOMAIN and no E2B_SANDBOX_URL')
  process.exit(2)
}
const resolved = []
const lookup = dns.lookup
dns.lookup = function (hostname, options, callback) {
  if (typeof options === 'function') {
    callback = options
    options = {}
  }
  const host = String(hostname).toLowerCase()
  if (host === domain || host.endsWith(`.${domain}`)) {
    resolved.push(host)
    if (options && options.all) {
      process.nextTick(callback, null, [{ address: '127.0.0.1', family: 4 }])
    } else {
      process.nextTick(callback, null, '127.0.0.1', 4)
    }
    return
  }
  return lookup.call(dns, hostname, options, callback)
}

// With SANDPIT_TLS_CODE=1 the code interpreter SDK is run the same way: it
// reaches https://49999-<id>.<domain> (getHost(49999)) by itself, and a
// request there without the sandbox's access token is refused.
async function runCode() {
  const { Sandbox } = await import('@e2b/code-interpreter')
  const sbx = await Sandbox.create({ metadata: { t: 'tls-code' } })
  try {
    const exec = await sbx.runCode('6 * 7')
    const res = await fetch(`https://${sbx.getHost(49999)}/execute`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ code: 'print(1)' }),
    })
    return { code: exec.text, codeHost: sbx.getHost(49999), noToken: res.status }
  } finally {
    await sbx.kill()
  }
}

const { Sandbox } = await import('e2b')
const sbx = await Sandbox.create()
try {
  const res = await sbx.commands.run('echo hello from $(hostname)')
  const code = process.env.SANDPIT_TLS_CODE === '1' ? await runCode() : {}
  console.log(JSON.stringify({
    sandboxId: sbx.sandboxId,
    sandboxDomain: sbx.sandboxDomain,
    stdout: res.stdout,
    exitCode: res.exitCode,
    resolved: [...new Set(resolved)],
    ...code,
  }))
} finally {
  await sbx.kill()
}
