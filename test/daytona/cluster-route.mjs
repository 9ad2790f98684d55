// Finds a sandbox that another node of a cluster runs by its name with the
// official SDK pointed at one node only, and executes in it: the node
// forwards the lookup and the toolbox calls, a PTY's WebSocket included, to
// the owner. The Go test
// TestClusterRoutesFromAnyNode (test/cluster) starts the cluster, places the
// sandbox and runs this script; it prints one JSON line.
import { Daytona } from '@daytonaio/sdk';

const name = process.env.ROUTE_SANDBOX_NAME;
if (!name || !process.env.ROUTE_API_URL) {
  console.error('want ROUTE_SANDBOX_NAME and ROUTE_API_URL');
  process.exit(2);
}
const daytona = new Daytona({ apiUrl: process.env.ROUTE_API_URL, apiKey: process.env.ROUTE_API_KEY });
const sandbox = await daytona.get(name);
const res = await sandbox.process.executeCommand('cat /tmp/www/index.html');
const preview = await sandbox.getPreviewLink(8080);

// A PTY is a WebSocket: it too passes through the node the SDK talks to.
let ptyText = '';
let seen;
const sawOutput = new Promise((resolve) => { seen = resolve; });
const pty = await sandbox.process.createPty({
  id: 'route',
  onData(bytes) {
    ptyText += Buffer.from(bytes).toString('utf8');
    if (/pty-5/.test(ptyText)) seen();
  },
});
await pty.sendInput('echo pty-$((2+3))\n');
const timer = setTimeout(() => { console.error(`no pty-5 in PTY output: ${JSON.stringify(ptyText)}`); process.exit(3); }, 20_000);
await sawOutput;
clearTimeout(timer);
await pty.kill();

console.log(JSON.stringify({ id: sandbox.id, name: sandbox.name, result: res.result, exitCode: res.exitCode, previewUrl: preview.url, pty: /pty-5/.test(ptyText) }));
// The SDK keeps an event socket open for the sandbox; the answer is out.
process.exit(0);
