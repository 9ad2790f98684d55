// Drives the official Daytona SDK against https://api.<domain>/daytona, the
// builtin proxy's TLS listener (serve --tls internal), and fetches the URL
// getPreviewLink hands out over https from Node. The Go test
// TestBuiltinTLSDaytonaDomain starts the daemon, trusts its CA through
// NODE_EXTRA_CA_CERTS and runs this script; it prints one JSON line.
//
// Names under RESOLVE_DOMAIN resolve to loopback in this process only, as a
// wildcard DNS record would, without touching the machine's resolver.
import dns from 'node:dns';
import { Daytona } from '@daytonaio/sdk';

const domain = process.env.RESOLVE_DOMAIN;
const resolved = new Set();
const lookup = dns.lookup;
dns.lookup = function (hostname, options, callback) {
  if (typeof options === 'function') {
    callback = options;
    options = {};
  }
  const host = String(hostname).toLowerCase();
  if (host === domain || host.endsWith(`.${domain}`)) {
    resolved.add(host);
    if (options && options.all) process.nextTick(callback, null, [{ address: '127.0.0.1', family: 4 }]);
    else process.nextTick(callback, null, '127.0.0.1', 4);
    return;
  }
  return lookup.call(dns, hostname, options, callback);
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const daytona = new Daytona({ apiUrl: process.env.DAYTONA_API_URL, apiKey: process.env.DAYTONA_API_KEY });
const sandbox = await daytona.create({ labels: { test: 'tls-domain' } });
const out = {};
try {
  const res = await sandbox.process.executeCommand(
    'mkdir -p /tmp/www && printf preview-over-https > /tmp/www/index.html && (busybox httpd -p 8080 -h /tmp/www &) && echo started',
  );
  out.result = res.result;
  const link = await sandbox.getPreviewLink(8080);
  out.url = link.url;
  for (let i = 0; i < 100; i++) {
    try {
      const r = await fetch(link.url, { headers: link.token ? { 'x-daytona-preview-token': link.token } : {} });
      out.preview = { status: r.status, body: await r.text() };
      if (r.status === 200) break;
    } catch (err) {
      out.preview = { error: `${err} ${err.cause ?? ''}` };
    }
    await sleep(150);
  }
  // A signed preview URL names no route of its own: its host is valid only
  // with the daemon's signature, and gets a certificate then.
  const signed = await sandbox.getSignedPreviewUrl(8080, 600);
  out.signedUrl = signed.url;
  try {
    const r = await fetch(signed.url);
    out.signed = { status: r.status, body: await r.text() };
  } catch (err) {
    out.signed = { error: `${err} ${err.cause ?? ''}` };
  }
} finally {
  await sandbox.delete();
}
out.resolved = [...resolved];
console.log(JSON.stringify(out));
process.exit(0);
