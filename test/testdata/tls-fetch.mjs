// Fetches the URL in FETCH_URL with Node's own fetch and prints one JSON
// line {status, body}. The test trusts the daemon's internal CA through
// NODE_EXTRA_CA_CERTS, and names under RESOLVE_DOMAIN resolve to
// RESOLVE_ADDR in this process only (the hook below answers node's
// resolver for them, as a wildcard DNS record would), without touching the
// machine's resolver.

import dns from 'node:dns'

const domain = process.env.RESOLVE_DOMAIN
const addr = process.env.RESOLVE_ADDR || '127.0.0.1'
const lookup = dns.lookup
dns.lookup = function (hostname, options, callback) {
  if (typeof options === 'function') {
    callback = options
    options = {}
  }
  const host = String(hostname).toLowerCase()
  if (domain && (host === domain || host.endsWith(`.${domain}`))) {
    if (options && options.all) {
      process.nextTick(callback, null, [{ address: addr, family: 4 }])
    } else {
      process.nextTick(callback, null, addr, 4)
    }
    return
  }
  return lookup.call(dns, hostname, options, callback)
}

try {
  const res = await fetch(process.env.FETCH_URL)
  console.log(JSON.stringify({ status: res.status, body: await res.text() }))
} catch (err) {
  console.log(JSON.stringify({ error: String(err), cause: String(err.cause ?? '') }))
  process.exit(1)
}
