// Drives the official Daytona SDK through domain rules on egress
// (domainAllowList on create, updateNetworkSettings). The Go test
// TestEgressByNameSDKs owns the "internet" and runs this script against its
// daemon; the script prints one JSON line. PROBE and CA are host paths of
// the static probe program and the test CA, copied into the sandbox.
import { readFile } from 'node:fs/promises';
import { Daytona } from '@daytonaio/sdk';

const daytona = new Daytona({ apiUrl: process.env.SANDPIT_URL + '/daytona', apiKey: process.env.SANDPIT_TOKEN });
const out = {};

async function run(sandbox, args) {
  const r = await sandbox.process.executeCommand(`/tmp/egress-probe ${args}`, undefined, undefined, 30);
  return { ok: r.exitCode === 0, out: r.result.trim() };
}

const sandbox = await daytona.create({ domainAllowList: 'allowed.test,*.wild.test' });
try {
  await sandbox.fs.uploadFile(await readFile(process.env.PROBE), '/tmp/egress-probe');
  await sandbox.fs.uploadFile(await readFile(process.env.CA), '/tmp/egress-ca.pem');
  await sandbox.process.executeCommand('chmod +x /tmp/egress-probe');
  out.createdList = sandbox.domainAllowList ?? null;
  out.created = {
    allowed: await run(sandbox, 'get https://allowed.test/'),
    wild: await run(sandbox, 'get https://a.wild.test/'),
    other: await run(sandbox, 'get https://other.test/'),
  };
  // A new list replaces the old one for the next connection.
  await sandbox.updateNetworkSettings({ domainAllowList: 'other.test' });
  out.swapped = {
    allowed: await run(sandbox, 'get https://allowed.test/'),
    other: await run(sandbox, 'get https://other.test/'),
  };
  // Block everything.
  await sandbox.updateNetworkSettings({ networkBlockAll: true });
  out.blocked = { other: await run(sandbox, 'get https://other.test/') };
  out.blockAll = sandbox.networkBlockAll;
  out.sandboxId = sandbox.id;
} finally {
  await sandbox.delete();
}
console.log(JSON.stringify(out));
