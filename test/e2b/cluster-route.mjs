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

// Signed file URLs name no sandbox, only a signature made with its token:
// the node finds the owner by asking the others.
const down = await sbx.downloadUrl('/tmp/from-e2b.txt', { useSignatureExpiration: 120 })
const downRes = await fetch(down)
const signedDown = { status: downRes.status, body: await downRes.text(), origin: new URL(down).origin }
const form = new FormData()
form.append('file', new Blob(['uploaded through a signed URL']), 'ignored')
const upRes = await fetch(await sbx.uploadUrl('/tmp/signed-up.txt', { useSignatureExpiration: 120 }), { method: 'POST', body: form })
await upRes.arrayBuffer()
const signedUp = { status: upRes.status, body: await sbx.files.read('/tmp/signed-up.txt') }
const forged = new URL(down)
forged.searchParams.set('signature', 'v1_' + 'A'.repeat(43))
const forgedRes = await fetch(forged)
await forgedRes.arrayBuffer()

console.log(JSON.stringify({ id: sbx.sandboxId, stdout: run.stdout.trim(), exitCode: run.exitCode, page, back, signedDown, signedUp, forgedStatus: forgedRes.status }))
