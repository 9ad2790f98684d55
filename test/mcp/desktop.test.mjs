// The MCP desktop tools through the official MCP TypeScript client over
// Streamable HTTP, on a real daemon and a sandbox made from the desktop
// template (images/desktop, scripts/build-desktop-image.sh): screenshot
// (which starts the desktop), click, type_text into a terminal, key, scroll.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

import { setup, startDaemon, teardown, runId, sleep } from '../e2b/helpers.mjs'
import { desktopImage } from '../desktop-image.mjs'

const T = 240_000
let d
let client
let id

before(async () => {
  await desktopImage()
  await setup()
  d = await startDaemon({ name: 'mcp-desktop' })
  client = new Client({ name: 'sandpit-mcp-desktop-test', version: '0.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${d.apiPort}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${d.token}` } },
  }))
}, { timeout: 3_600_000 })

after(async () => {
  await client?.close()
  await teardown()
})

async function call(name, args) {
  const res = await client.callTool({ name, arguments: args })
  assert.ok(!res.isError, `${name} failed: ${JSON.stringify(res.content).slice(0, 500)}`)
  return res
}

// run runs a command in the sandbox and answers its stdout.
async function run(command) {
  return (await call('run_command', { sandbox_id: id, command })).structuredContent.stdout
}

async function until(what, check, ms = 60_000) {
  const deadline = Date.now() + ms
  for (;;) {
    const err = await check().catch((e) => `${e}`)
    if (!err) return
    if (Date.now() > deadline) throw new Error(`${what}: ${err}`)
    await sleep(250)
  }
}

test('the desktop tools are listed', { timeout: T }, async () => {
  const { tools } = await client.listTools()
  const names = tools.map((t) => t.name)
  for (const n of ['screenshot', 'click', 'type_text', 'key', 'scroll']) assert.ok(names.includes(n), `${n} missing from ${names}`)
})

test('screenshot starts the desktop and answers a PNG image of the screen', { timeout: T }, async () => {
  const made = await call('create_sandbox', { template: 'desktop', labels: { test: `mcp-desktop-${randomBytes(4).toString('hex')}`, run: runId } })
  id = made.structuredContent.id
  const shot = await call('screenshot', { sandbox_id: id })
  const image = shot.content.find((c) => c.type === 'image')
  assert.equal(image.mimeType, 'image/png')
  const png = Buffer.from(image.data, 'base64')
  assert.equal(png.subarray(1, 4).toString('latin1'), 'PNG')
  assert.deepEqual([png.readUInt32BE(16), png.readUInt32BE(20)], [1024, 768])
  assert.equal(shot.structuredContent.bytes, png.length)
  // A second call starts nothing more.
  await call('screenshot', { sandbox_id: id })
  assert.equal((await run('pgrep -c -x Xvfb; pgrep -c -x xfce4-session')).trim(), '1\n1')
})

test('click, type_text and key drive a terminal: the typed command runs', { timeout: T }, async () => {
  await run('DISPLAY=:0 setsid xfce4-terminal >/tmp/terminal.log 2>&1 </dev/null &')
  let geo
  await until('a terminal window', async () => {
    const out = await run('export DISPLAY=:0; xdotool search --onlyvisible --class xfce4-terminal | head -n1 | xargs -r xdotool getwindowgeometry --shell')
    geo = Object.fromEntries(out.trim().split('\n').filter(Boolean).map((l) => l.split('=')).map(([k, v]) => [k, Number(v)]))
    return geo.WIDTH > 0 ? null : `${JSON.stringify(out)}: ${await run('id; pgrep -a xfce4-terminal; cat /tmp/terminal.log')}`
  })
  const x = geo.X + Math.floor(geo.WIDTH / 2)
  const y = geo.Y + Math.floor(geo.HEIGHT / 2)
  const clicked = await call('click', { sandbox_id: id, x, y })
  assert.deepEqual(clicked.structuredContent, { x, y })
  await call('type_text', { sandbox_id: id, text: 'echo "mcp $((6 * 7))" > /tmp/mcp.txt' })
  await call('key', { sandbox_id: id, keys: 'enter' })
  await until('the typed command ran', async () => {
    const out = await run('cat /tmp/mcp.txt 2>/dev/null || true')
    return out === 'mcp 42\n' ? null : JSON.stringify(out)
  }, 30_000)
  await call('key', { sandbox_id: id, keys: 'ctrl+l' })
  await call('scroll', { sandbox_id: id, x, y, direction: 'up', amount: 2 })
  const bad = await client.callTool({ name: 'key', arguments: { sandbox_id: id, keys: 'no such key!' } })
  assert.equal(bad.isError, true)
  await call('delete_sandbox', { sandbox_id: id })
})
