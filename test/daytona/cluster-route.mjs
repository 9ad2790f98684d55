// Finds a sandbox that another node of a cluster runs by its name with the
// official SDK pointed at one node only, and executes in it: the node
// forwards the lookup and the toolbox calls to the owner. The Go test
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
console.log(JSON.stringify({ id: sandbox.id, name: sandbox.name, result: res.result, exitCode: res.exitCode, previewUrl: preview.url }));
// The SDK keeps an event socket open for the sandbox; the answer is out.
process.exit(0);
