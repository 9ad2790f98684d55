// The official MCP TypeScript client against sandpit's MCP server on a real
// daemon, over stdio (`sandpit mcp`, the way a desktop agent starts it) and
// over Streamable HTTP (/mcp on the API listener): list the tools, create a
// sandbox on the base image, run commands and read their exit codes, write,
// read and list files, expose a port of a server started in the sandbox and
// fetch its URL, read the resources, delete. Then the promises: the same
// tools/call sent twice with one request id makes one sandbox, another
// owner's token cannot see the sandbox, and /mcp without a token is 401.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { randomBytes } from 'node:crypto'

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js'

import { setup, startDaemon, teardown, repoRoot, runId, sleep } from '../e2b/helpers.mjs'

const run = promisify(execFile)
const T = 240_000 // per-test timeout
const baseImage = process.env.SANDPIT_BASE_IMAGE_REF || 'sandpit/base:latest'

let d

before(async () => {
  await setup()
  try {
    await run('docker', ['image', 'inspect', baseImage])
  } catch {
    // Cached by a hash of its recipe: instant once built on this machine.
    await run(join(repoRoot, 'scripts', 'build-base-image.sh'), [], { maxBuffer: 64 << 20 })
  }
  // The code-interpreter template, for run_code: a daemon serves it when
  // its image exists at start. Cached by its recipe's hash.
  await run(join(repoRoot, 'scripts', 'build-code-interpreter-image.sh'), [], { maxBuffer: 64 << 20 })
  d = await startDaemon({ name: 'mcp', args: ['--default-image', baseImage] })
})

after(async () => {
  await teardown()
})

const tag = (name) => `${name}-${randomBytes(4).toString('hex')}`

// api calls the native API, with the admin token unless told otherwise.
async function api(method, path, body, token = d.token) {
  const res = await fetch(`http://127.0.0.1:${d.apiPort}${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : undefined }
}

// tokenFor makes a personal access token of an owner.
async function tokenFor(owner) {
  const res = await api('POST', '/v1/tokens', { name: tag(owner), owner })
  assert.ok(res.status === 200 || res.status === 201, JSON.stringify(res.body))
  return res.body.token
}

// sandboxesLabelled counts the sandboxes with label test=<value>, of every
// owner (the admin sees them all).
async function sandboxesLabelled(value) {
  const res = await api('GET', `/v1/sandboxes?label=${encodeURIComponent(`test=${value}`)}`)
  assert.equal(res.status, 200)
  return res.body.sandboxes
}

const mcpUrl = () => new URL(`http://127.0.0.1:${d.apiPort}/mcp`)

// The two transports, each a function making a fresh one for a token.
const transports = {
  stdio: (token) => {
    const t = new StdioClientTransport({
      command: d.proc.spawnfile,
      args: ['mcp', '--addr', `127.0.0.1:${d.apiPort}`],
      env: { SANDPIT_TOKEN: token, SANDPIT_TOKEN_FILE: '' },
      stderr: 'pipe',
    })
    t.log = ''
    t.stderr.on('data', (b) => { t.log += b.toString() })
    return t
  },
  http: (token) => new StreamableHTTPClientTransport(mcpUrl(), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }),
}

async function connect(kind, token = d.token) {
  const client = new Client({ name: 'sandpit-mcp-test', version: '0.0.0' })
  await client.connect(transports[kind](token))
  return client
}

// call calls a tool and fails the test on a tool error.
async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args })
  assert.ok(!res.isError, `${name} failed: ${JSON.stringify(res.content).slice(0, 500)}`)
  return res
}

// toolError calls a tool that must fail and returns its message.
async function toolError(client, name, args) {
  const res = await client.callTool({ name, arguments: args })
  assert.equal(res.isError, true, `${name} should have failed: ${JSON.stringify(res).slice(0, 500)}`)
  return res.content.map((c) => c.text).join('\n')
}

// rawSession speaks JSON-RPC over an SDK transport directly, so that a test
// can choose the request ids (the Client numbers them itself).
async function rawSession(transport) {
  const pending = new Map()
  transport.onmessage = (msg) => {
    const p = pending.get(msg.id)
    if (p && ('result' in msg || 'error' in msg)) {
      pending.delete(msg.id)
      p(msg)
    }
  }
  await transport.start()
  const request = (id, method, params) => {
    const answer = new Promise((resolve) => pending.set(id, resolve))
    return transport.send({ jsonrpc: '2.0', id, method, params }).then(() => answer)
  }
  const init = await request(0, 'initialize', {
    protocolVersion: LATEST_PROTOCOL_VERSION,
    capabilities: {},
    clientInfo: { name: 'sandpit-mcp-raw', version: '0.0.0' },
  })
  assert.ok(init.result, JSON.stringify(init))
  if (transport.setProtocolVersion) transport.setProtocolVersion(init.result.protocolVersion)
  await transport.send({ jsonrpc: '2.0', method: 'notifications/initialized' })
  return { request, close: () => transport.close() }
}

const expectedTools = ['create_sandbox', 'list_sandboxes', 'get_sandbox', 'run_command', 'run_code', 'write_file', 'read_file',
  'list_files', 'expose_port', 'snapshot_sandbox', 'fork_sandbox', 'delete_sandbox']

for (const kind of Object.keys(transports)) {
  describe(`over ${kind}`, () => {
    test('an agent session: create, run, files, port, resources, delete', { timeout: T }, async () => {
      const client = await connect(kind)
      try {
        const { tools } = await client.listTools()
        const names = tools.map((t) => t.name)
        for (const n of expectedTools) assert.ok(names.includes(n), `tool ${n} missing from ${names}`)
        const create = tools.find((t) => t.name === 'create_sandbox')
        assert.ok(create.inputSchema.properties.image && create.inputSchema.properties.network, JSON.stringify(create.inputSchema))

        const label = tag(kind)
        const made = await call(client, 'create_sandbox', { labels: { test: label, run: runId } })
        const id = made.structuredContent.id
        assert.match(id, /^[a-z0-9]+$/)
        assert.equal(made.structuredContent.state, 'running')
        assert.equal(made.structuredContent.image, baseImage)

        // Env, limits and a network policy reach the sandbox.
        const tuned = await call(client, 'create_sandbox', {
          env: { GREETING: 'hi' }, cpu: 0.5, memory_mb: 256, timeout_s: 600,
          network: { egress: 'none', allow_domains: ['pypi.org'] }, labels: { test: label, run: runId },
        })
        const t = tuned.structuredContent
        assert.equal(t.cpu, 0.5)
        assert.equal(t.memory_mb, 256)
        assert.ok(t.end_at, JSON.stringify(t))
        assert.deepEqual(t.network, { egress: 'none', allow_domains: ['pypi.org'] })
        const env = await call(client, 'run_command', { sandbox_id: t.id, command: 'echo $GREETING' })
        assert.equal(env.structuredContent.stdout, 'hi\n')
        await call(client, 'delete_sandbox', { sandbox_id: t.id })

        const py = await call(client, 'run_command', { sandbox_id: id, command: "python3 -c 'print(6*7)'" })
        assert.equal(py.structuredContent.exit_code, 0)
        assert.equal(py.structuredContent.stdout, '42\n')
        assert.match(py.content[0].text, /exit code 0/)

        // A failing command is a result with its exit code, not a tool error.
        const fail = await call(client, 'run_command', { sandbox_id: id, command: 'echo oops >&2; exit 3' })
        assert.equal(fail.structuredContent.exit_code, 3)
        assert.equal(fail.structuredContent.stderr, 'oops\n')
        const argv = await call(client, 'run_command', { sandbox_id: id, argv: ['printf', '%s', 'no shell'] })
        assert.equal(argv.structuredContent.stdout, 'no shell')

        await call(client, 'write_file', { sandbox_id: id, path: '/tmp/www/hello.txt', content: `hello from ${kind}\n` })
        const read = await call(client, 'read_file', { sandbox_id: id, path: '/tmp/www/hello.txt' })
        assert.equal(read.structuredContent.content, `hello from ${kind}\n`)
        assert.equal(read.structuredContent.encoding, 'utf-8')
        await call(client, 'write_file', { sandbox_id: id, path: '/tmp/www/bin', content: Buffer.from([0, 255, 1]).toString('base64'), encoding: 'base64' })
        const bin = await call(client, 'read_file', { sandbox_id: id, path: '/tmp/www/bin' })
        assert.deepEqual(bin.structuredContent, { path: '/tmp/www/bin', bytes: 3, content: 'AP8B', encoding: 'base64' })
        const ls = await call(client, 'list_files', { sandbox_id: id, path: '/tmp/www' })
        assert.deepEqual(ls.structuredContent.entries.map((e) => [e.name, e.type]).sort(), [['bin', 'file'], ['hello.txt', 'file']])

        // A server in the sandbox, exposed: its URL answers from here.
        await call(client, 'run_command', { sandbox_id: id, command: 'cd /tmp/www && nohup python3 -m http.server 8080 >/dev/null 2>&1 &' })
        // Until it answers; the test's own timeout bounds the wait.
        for (;;) {
          const up = await call(client, 'run_command', { sandbox_id: id, argv: ['python3', '-c', "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/')"] })
          if (up.structuredContent.exit_code === 0) break
          await sleep(100)
        }
        const port = await call(client, 'expose_port', { sandbox_id: id, port: 8080 })
        assert.match(port.structuredContent.url, /^http:\/\//)
        const page = await fetch(`${port.structuredContent.url}/hello.txt`)
        assert.equal(page.status, 200)
        assert.equal(await page.text(), `hello from ${kind}\n`)

        // The resources: the sandbox list and a file.
        const { resources } = await client.listResources()
        assert.ok(resources.some((r) => r.uri === 'sandpit://sandboxes'))
        const { resourceTemplates } = await client.listResourceTemplates()
        assert.ok(resourceTemplates.some((r) => r.uriTemplate === 'sandpit://sandboxes/{id}/files/{+path}'))
        const list = await client.readResource({ uri: 'sandpit://sandboxes' })
        assert.ok(JSON.parse(list.contents[0].text).sandboxes.some((s) => s.id === id))
        const file = await client.readResource({ uri: `sandpit://sandboxes/${id}/files/tmp/www/hello.txt` })
        assert.equal(file.contents[0].text, `hello from ${kind}\n`)

        // Clear tool errors: a name in use, bad input, a missing file, no interpreter.
        const named = tag('named')
        const first = await call(client, 'create_sandbox', { name: named, labels: { test: label, run: runId } })
        assert.match(await toolError(client, 'create_sandbox', { name: named }), /create_sandbox: conflict: /)
        await call(client, 'delete_sandbox', { sandbox_id: first.structuredContent.id })
        assert.match(await toolError(client, 'get_sandbox', { sandbox_id: first.structuredContent.id }), /not found/)
        assert.match(await toolError(client, 'run_command', { sandbox_id: id }), /command .* or argv .* is required/)
        assert.match(await toolError(client, 'expose_port', { sandbox_id: id, port: 70000 }), /port must be between 1 and 65535/)
        assert.match(await toolError(client, 'read_file', { sandbox_id: id, path: '/tmp/www/none' }), /read_file: not found/)
        assert.match(await toolError(client, 'run_code', { sandbox_id: id, code: '1+1' }), /run_code: conflict: .*interpreter/i)

        await call(client, 'delete_sandbox', { sandbox_id: id })
        assert.match(await toolError(client, 'get_sandbox', { sandbox_id: id }), /get_sandbox: not found/)
        assert.equal((await sandboxesLabelled(label)).length, 0)
      } finally {
        await client.close()
      }
    })

    test('files up to 4 MiB travel in one message; larger ones are refused', { timeout: T }, async () => {
      const client = await connect(kind)
      const id = (await call(client, 'create_sandbox', { labels: { test: tag('big'), run: runId } })).structuredContent.id
      try {
        const big = randomBytes(4 << 20)
        await call(client, 'write_file', { sandbox_id: id, path: '/tmp/big.bin', content: big.toString('base64'), encoding: 'base64' })
        const back = await call(client, 'read_file', { sandbox_id: id, path: '/tmp/big.bin', encoding: 'base64' })
        assert.equal(back.structuredContent.bytes, big.length)
        assert.ok(Buffer.from(back.structuredContent.content, 'base64').equals(big))
        const textFile = 'sandpit\n'.repeat(1 << 19) // 4 MiB of text
        await call(client, 'write_file', { sandbox_id: id, path: '/tmp/big.txt', content: textFile })
        const textBack = await call(client, 'read_file', { sandbox_id: id, path: '/tmp/big.txt' })
        assert.equal(textBack.structuredContent.bytes, textFile.length)
        assert.ok(textBack.structuredContent.content === textFile)
        const tooBig = randomBytes((4 << 20) + 1).toString('base64')
        assert.match(await toolError(client, 'write_file', { sandbox_id: id, path: '/tmp/x', content: tooBig, encoding: 'base64' }), /at most 4194304/)
        await call(client, 'run_command', { sandbox_id: id, command: 'head -c 4194305 /dev/zero > /tmp/huge' })
        assert.match(await toolError(client, 'read_file', { sandbox_id: id, path: '/tmp/huge' }), /larger than 4194304 bytes/)
      } finally {
        await call(client, 'delete_sandbox', { sandbox_id: id })
        await client.close()
      }
    })

    test('the same tools/call sent twice with one request id makes one sandbox', { timeout: T }, async () => {
      const label = tag(`dup-${kind}`)
      const args = { name: 'create_sandbox', arguments: { labels: { test: label, run: runId } } }
      const s = await rawSession(transports[kind](d.token))
      let id
      try {
        const first = await s.request(7, 'tools/call', args)
        const again = await s.request(7, 'tools/call', args)
        assert.ok(!first.result.isError, JSON.stringify(first))
        id = first.result.structuredContent.id
        assert.equal(again.result.structuredContent.id, id)
        const made = await sandboxesLabelled(label)
        assert.deepEqual(made.map((sb) => sb.id), [id])
        // The same id for a different call is refused, and makes nothing.
        const reused = await s.request(7, 'tools/call', { name: 'create_sandbox', arguments: { labels: { test: label, run: runId, other: 'x' } } })
        assert.equal(reused.result.isError, true, JSON.stringify(reused))
        assert.match(reused.result.content[0].text, /create_sandbox: bad input: .*already used for a different request/)
        assert.equal((await sandboxesLabelled(label)).length, 1)
        // A new id in the same session is a new call.
        const other = await s.request(8, 'tools/call', args)
        assert.notEqual(other.result.structuredContent.id, id)
        assert.equal((await sandboxesLabelled(label)).length, 2)
        // Deleting twice under one id is one delete, answered the same.
        const del = { name: 'delete_sandbox', arguments: { sandbox_id: id } }
        const d1 = await s.request(9, 'tools/call', del)
        const d2 = await s.request(9, 'tools/call', del)
        assert.ok(!d1.result.isError && !d2.result.isError, JSON.stringify([d1, d2]))
      } finally {
        await s.close()
      }
      // Another session numbers its requests anew: its id 7 is its own call.
      const s2 = await rawSession(transports[kind](d.token))
      try {
        const fresh = await s2.request(7, 'tools/call', args)
        assert.ok(!fresh.result.isError, JSON.stringify(fresh))
        assert.notEqual(fresh.result.structuredContent.id, id)
      } finally {
        await s2.close()
      }
      for (const sb of await sandboxesLabelled(label)) await api('DELETE', `/v1/sandboxes/${sb.id}`)
    })
  })
}

describe('run_code', () => {
  test('code runs on the interpreter of a code-interpreter-v1 sandbox', { timeout: T }, async () => {
    const client = await connect('stdio')
    try {
      const made = await call(client, 'create_sandbox', { template: 'code-interpreter-v1', labels: { test: tag('code'), run: runId } })
      const id = made.structuredContent.id
      try {
        const res = await call(client, 'run_code', { sandbox_id: id, code: 'x = 6\nprint(x*7)\nx*7' })
        assert.equal(res.structuredContent.stdout, '42\n')
        assert.equal(res.structuredContent.text, '42')
        assert.equal(res.structuredContent.error, undefined)
        // The context keeps x; an exception is a result the model reads.
        const err = await call(client, 'run_code', { sandbox_id: id, code: 'x / 0' })
        assert.equal(err.structuredContent.error.name, 'ZeroDivisionError')
        assert.match(err.content[0].text, /ZeroDivisionError/)
      } finally {
        await call(client, 'delete_sandbox', { sandbox_id: id })
      }
    } finally {
      await client.close()
    }
  })
})

describe('snapshots and forks', () => {
  test('snapshot, fork (one copy for a re-sent call) and create from the snapshot', { timeout: T }, async () => {
    const label = tag('forks')
    const client = await connect('http')
    const ids = []
    try {
      const made = await call(client, 'create_sandbox', { labels: { test: label, run: runId } })
      const id = made.structuredContent.id
      ids.push(id)
      await call(client, 'write_file', { sandbox_id: id, path: '/home/user/state.txt', content: 'kept' })
      const snap = await call(client, 'snapshot_sandbox', { sandbox_id: id, name: tag('snap') })
      assert.ok(snap.structuredContent.id, JSON.stringify(snap.structuredContent))
      const from = await call(client, 'create_sandbox', { template: snap.structuredContent.id, labels: { test: label, run: runId } })
      ids.push(from.structuredContent.id)
      const kept = await call(client, 'read_file', { sandbox_id: from.structuredContent.id, path: '/home/user/state.txt' })
      assert.equal(kept.structuredContent.content, 'kept')

      const s = await rawSession(transports.http(d.token))
      try {
        const fork = { name: 'fork_sandbox', arguments: { sandbox_id: id } }
        const f1 = await s.request('fork-1', 'tools/call', fork)
        const f2 = await s.request('fork-1', 'tools/call', fork)
        assert.ok(!f1.result.isError, JSON.stringify(f1))
        const copies = f1.result.structuredContent.sandboxes.map((sb) => sb.id)
        assert.equal(copies.length, 1)
        ids.push(...copies)
        assert.deepEqual(f2.result.structuredContent.sandboxes.map((sb) => sb.id), copies)
        const copy = await call(client, 'read_file', { sandbox_id: copies[0], path: '/home/user/state.txt' })
        assert.equal(copy.structuredContent.content, 'kept')
      } finally {
        await s.close()
      }
      // The parent, the sandbox made from the snapshot and one copy.
      const all = (await api('GET', '/v1/sandboxes')).body.sandboxes.filter((sb) => ids.includes(sb.id) || sb.labels?.test === label)
      assert.equal(all.length, 3, JSON.stringify(all.map((sb) => sb.id)))
    } finally {
      for (const id of ids) await api('DELETE', `/v1/sandboxes/${id}`)
      await client.close()
    }
  })
})

describe('owners', () => {
  test("another owner's token cannot see or touch the sandbox, on either transport", { timeout: T }, async () => {
    const alice = await tokenFor('alice')
    const bob = await tokenFor('bob')
    const label = tag('owners')
    const a = await connect('http', alice)
    const made = await call(a, 'create_sandbox', { labels: { test: label, run: runId } })
    const id = made.structuredContent.id
    try {
      for (const kind of Object.keys(transports)) {
        const b = await connect(kind, bob)
        try {
          const list = await call(b, 'list_sandboxes', {})
          assert.deepEqual(list.structuredContent.sandboxes, [], kind)
          assert.match(await toolError(b, 'get_sandbox', { sandbox_id: id }), /not found/)
          assert.match(await toolError(b, 'run_command', { sandbox_id: id, command: 'true' }), /not found/)
          assert.match(await toolError(b, 'read_file', { sandbox_id: id, path: '/etc/hostname' }), /not found/)
          assert.match(await toolError(b, 'delete_sandbox', { sandbox_id: id }), /not found/)
          const res = await b.readResource({ uri: 'sandpit://sandboxes' })
          assert.deepEqual(JSON.parse(res.contents[0].text).sandboxes, [])
          await assert.rejects(b.readResource({ uri: `sandpit://sandboxes/${id}/files/etc/hostname` }))
        } finally {
          await b.close()
        }
      }
      // Alice still has it, and sees it.
      const mine = await call(a, 'list_sandboxes', {})
      assert.deepEqual(mine.structuredContent.sandboxes.map((s) => s.id), [id])
    } finally {
      await call(a, 'delete_sandbox', { sandbox_id: id })
      await a.close()
    }
  })

  test("a session opened with one owner's token refuses another's", { timeout: T }, async () => {
    const alice = await tokenFor('alice')
    const bob = await tokenFor('bob')
    const t = transports.http(alice)
    const s = await rawSession(t)
    try {
      const res = await fetch(mcpUrl(), {
        method: 'POST',
        headers: {
          Authorization: `Bearer ${bob}`, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
          'Mcp-Session-Id': t.sessionId, 'Mcp-Protocol-Version': LATEST_PROTOCOL_VERSION,
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'list_sandboxes', arguments: {} } }),
      })
      assert.ok(res.status >= 400, `status ${res.status}`)
    } finally {
      await s.close()
    }
  })

  test("a read-only token reads but may not create or run", { timeout: T }, async () => {
    const res = await api('POST', '/v1/tokens', { name: tag('reader'), owner: 'alice', scopes: ['sandboxes:read'] })
    assert.ok(res.status === 200 || res.status === 201, JSON.stringify(res.body))
    const alice = await tokenFor('alice')
    const label = tag('scopes')
    const a = await connect('http', alice)
    const r = await connect('stdio', res.body.token)
    try {
      const id = (await call(a, 'create_sandbox', { labels: { test: label, run: runId } })).structuredContent.id
      assert.ok((await call(r, 'list_sandboxes', {})).structuredContent.sandboxes.some((sb) => sb.id === id))
      assert.match(await toolError(r, 'run_command', { sandbox_id: id, command: 'true' }), /run_command: forbidden: .*sandboxes:write/)
      assert.match(await toolError(r, 'create_sandbox', {}), /create_sandbox: forbidden/)
      assert.match(await toolError(r, 'delete_sandbox', { sandbox_id: id }), /delete_sandbox: forbidden/)
      assert.equal((await sandboxesLabelled(label)).length, 1)
      await call(a, 'delete_sandbox', { sandbox_id: id })
    } finally {
      await a.close()
      await r.close()
    }
  })

  test('/mcp wants a valid token before anything else', { timeout: T }, async () => {
    const body = JSON.stringify({
      jsonrpc: '2.0', id: 0, method: 'initialize',
      params: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'x', version: '0' } },
    })
    const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' }
    for (const auth of [undefined, 'Bearer not-a-token', 'Basic Zm9vOmJhcg==']) {
      const res = await fetch(mcpUrl(), { method: 'POST', headers: auth ? { ...headers, Authorization: auth } : headers, body })
      assert.equal(res.status, 401, `${auth}: ${res.status}`)
      assert.equal(res.headers.get('mcp-session-id'), null)
    }
    const client = new Client({ name: 'no-token', version: '0' })
    await assert.rejects(client.connect(new StreamableHTTPClientTransport(mcpUrl())))
  })
})

describe('shutdown', () => {
  test('a daemon with an open MCP session stops on SIGTERM without being killed', { timeout: T }, async () => {
    const d2 = await startDaemon({ name: 'mcp-stop' })
    const client = new Client({ name: 'open-session', version: '0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${d2.apiPort}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${d2.token}` } },
    }))
    await client.listTools()
    // stop() sends SIGTERM and falls back to SIGKILL only if the daemon
    // has not exited by then: an event stream the shutdown waited on
    // would show as a kill.
    await d2.stop()
    const exit = await d2.exited
    assert.notEqual(exit.signal, 'SIGKILL', `${JSON.stringify(exit)}\n${d2.log}`)
    await client.close().catch(() => {})
  })
})
