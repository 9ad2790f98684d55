// A Daytona SDK user script, run as a child process by sdk.test.mjs: it makes
// a few ordinary calls and prints a line when its last call has returned.
// The parent measures how long the process then takes to exit, which stays
// short only if the SDK's event socket handshake worked: the sandbox is left
// alive (the parent deletes it), so the SDK still holds a subscription for
// it, and with a failed socket it would keep reconnecting for minutes.
import { Daytona } from '@daytonaio/sdk';

const daytona = new Daytona({ apiUrl: process.env.PROBE_API_URL, apiKey: process.env.PROBE_API_KEY });
const sandbox = await daytona.create({ labels: { probe: process.env.PROBE_LABEL } });
const res = await sandbox.process.executeCommand('echo probe');
if (res.result.trim() !== 'probe') {
  console.error(`unexpected result ${JSON.stringify(res)}`);
  process.exit(2);
}
process.stdout.write(`LAST_CALL_DONE ${sandbox.id}\n`);
