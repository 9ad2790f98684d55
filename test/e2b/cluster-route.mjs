// Reaches a sandbox that another node of a cluster runs with the official
// SDK, through one node only: E2B_API_URL and E2B_SANDBOX_URL name that
// node, which forwards the control calls and the agent calls to the owner.
// The Go test TestClusterRoutesFromAnyNode (test/cluster) starts the cluster,
// places the sandbox and runs this script; it prints one JSON line.

import { Sandbox } from 'e2b'

const id = process.env.ROUTE_SANDBOX_ID
if (!id || !process.env.E2B_SANDBOX_URL) {
  console.error('want ROUTE_SANDBOX_ID and E2B_SANDBOX_URL')
  process.exit(2)
}
const sbx = await Sandbox.connect(id)
const run = await sbx.commands.run('echo routed-$((6*7))')
await sbx.files.write('/tmp/from-e2b.txt', 'written through another node')
const page = await sbx.files.read('/tmp/www/index.html')
const back = await sbx.files.read('/tmp/from-e2b.txt')
console.log(JSON.stringify({ id: sbx.sandboxId, stdout: run.stdout.trim(), exitCode: run.exitCode, page, back }))
