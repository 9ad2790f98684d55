// The official MCP TypeScript client against sandpit's MCP server (over
// Streamable HTTP, /mcp) on a real daemon: list_templates names the
// templates a sandbox can be created from, and stop_sandbox, pause_sandbox
// and resume_sandbox move a sandbox through its states, each repeatable.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

import { setup, startDaemon, teardown, runId } from '../e2b/helpers.mjs'

const T = 180_000
let d

before(async () => {
  await setup()
  d = await startDaemon({ name: 'mcp-life', args: ['--default-image', 'sandpit/base:test'] })
})

after(async () => {
  await teardown()
})

async function connect() {
  const client = new Client({ name: 'sandpit-mcp-lifecycle-test', version: '0.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${d.apiPort}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${d.token}` } },
  }))
  return client
}

async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args })
  assert.ok(!res.isError, `${name} failed: ${JSON.stringify(res.content).slice(0, 500)}`)
  return res
}

test('list_templates, stop_sandbox, pause_sandbox, resume_sandbox', { timeout: T }, async () => {
  const client = await connect()
  try {
    const { tools } = await client.listTools()
    const names = tools.map((t) => t.name)
    for (const n of ['list_templates', 'stop_sandbox', 'pause_sandbox', 'resume_sandbox']) {
      assert.ok(names.includes(n), `tool ${n} missing from ${names}`)
    }
    for (const n of ['list_templates']) assert.equal(tools.find((t) => t.name === n).annotations?.readOnlyHint, true)

    const made = await call(client, 'create_sandbox', { labels: { run: runId } })
    const id = made.structuredContent.id
    // A snapshot is a template: list_templates shows it, ready.
    const snap = await call(client, 'snapshot_sandbox', { sandbox_id: id, name: `snap-${randomBytes(3).toString('hex')}` })
    const listed = await call(client, 'list_templates', {})
    const found = listed.structuredContent.templates.find((t) => t.id === snap.structuredContent.id)
    assert.ok(found, JSON.stringify(listed.structuredContent))
    assert.equal(found.kind, 'snapshot')
    assert.equal(found.state, 'ready')

    for (const [tool, args, state] of [
      ['pause_sandbox', {}, 'paused'],
      ['pause_sandbox', {}, 'paused'], // again: no change, no error
      ['resume_sandbox', {}, 'running'],
      ['stop_sandbox', {}, 'stopped'],
      ['stop_sandbox', {}, 'stopped'],
      ['resume_sandbox', {}, 'running'], // a stopped sandbox starts
      ['resume_sandbox', {}, 'running'],
    ]) {
      const res = await call(client, tool, { sandbox_id: id, ...args })
      assert.equal(res.structuredContent.state, state, `${tool}: ${JSON.stringify(res.structuredContent)}`)
    }
    const ran = await call(client, 'run_command', { sandbox_id: id, command: 'echo back' })
    assert.equal(ran.structuredContent.stdout, 'back\n')

    const bad = await client.callTool({ name: 'pause_sandbox', arguments: { sandbox_id: id, mode: 'disk' } })
    assert.equal(bad.isError, true)
    assert.match(bad.content.map((c) => c.text).join('\n'), /memory or filesystem/)
    await call(client, 'delete_sandbox', { sandbox_id: id })
  } finally {
    await client.close()
  }
})
