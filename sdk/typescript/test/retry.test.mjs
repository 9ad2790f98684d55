// The retry policy and the event-stream parser against a scripted HTTP
// server: the answers here (429, a Retry-After, a 503 that is not a full
// pool, a stream cut between events) are faults a healthy daemon does not
// produce on demand.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createServer } from 'node:http'

import { Sandpit, SandpitError, NameConflictError, NetworkError, NotFoundError, PortPoolExhaustedError } from '../dist/index.js'

const uuidV4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

const sandboxBody = JSON.stringify({ id: 'sbscripted', image: 'img', state: 'running', labels: {}, env: {}, created_at: new Date().toISOString(), updated_at: new Date().toISOString() })

// scripted answers the n-th request with the n-th answer (the last repeats)
// and records each request's method, path and headers.
async function scripted(t, answers) {
  const requests = []
  const server = createServer((req, res) => {
    const n = requests.length
    requests.push({ method: req.method, path: req.url, headers: req.headers })
    req.resume()
    const a = answers[Math.min(n, answers.length - 1)]
    if (typeof a === 'function') return a(req, res)
    const [status, code, headers = {}] = a
    res.writeHead(status, { 'content-type': 'application/json', ...headers })
    res.end(status < 300 ? sandboxBody : JSON.stringify({ error: { code, message: `scripted ${code}` } }))
  })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  t.after(() => new Promise((r) => { server.closeAllConnections(); server.close(r) }))
  const sandpit = new Sandpit({ apiUrl: `127.0.0.1:${server.address().port}`, token: 'tok', retry: { maxAttempts: 4, baseDelayMs: 1, maxDelayMs: 5 } })
  return { sandpit, requests }
}

const create = (s) => s.create({ name: 'x' })

const cases = [
  { name: '503 twice then 201', answers: [[503, 'unavailable'], [503, 'unavailable'], [201]], attempts: 3 },
  { name: '429, 502, 504 then 201', answers: [[429, 'busy'], [502, 'upstream_failed'], [504, 'timeout'], [201]], attempts: 4 },
  { name: 'a Retry-After is honoured within the cap', answers: [[503, 'unavailable', { 'retry-after': '0' }], [201]], attempts: 2 },
  { name: 'a dropped connection then 201', answers: [(req, res) => res.socket.destroy(), [201]], attempts: 2 },
  { name: 'gives up after maxAttempts', answers: [[503, 'unavailable']], attempts: 4, error: SandpitError },
  { name: '409 is not retried', answers: [[409, 'name_conflict'], [201]], attempts: 1, error: NameConflictError },
  { name: '500 is not retried', answers: [[500, 'internal'], [201]], attempts: 1, error: SandpitError },
  { name: 'a full port pool is not retried', call: (s) => s.get('sb1').then((sb) => sb.exposePort(9000, { protocol: 'tcp' })), answers: [[200], [503, 'port_pool_exhausted'], [201]], attempts: 2, error: PortPoolExhaustedError, skipFirst: true },
]

for (const tc of cases) {
  test(`retries: ${tc.name}`, async (t) => {
    const { sandpit, requests } = await scripted(t, tc.answers)
    const call = (tc.call ?? create)(sandpit)
    if (tc.error) await assert.rejects(call, tc.error)
    else await call
    const calls = tc.skipFirst ? requests.slice(1) : requests
    assert.equal(requests.length, tc.attempts, JSON.stringify(requests.map((r) => r.path)))
    const keys = calls.map((r) => r.headers['idempotency-key'])
    assert.match(keys[0], uuidV4)
    assert.ok(keys.every((k) => k === keys[0]), `keys ${keys}`)
  })
}

test('retries: each logical call has its own key; reads carry none; maxAttempts 1 turns retries off', async (t) => {
  const { sandpit, requests } = await scripted(t, [[201]])
  await sandpit.create()
  await sandpit.create()
  await sandpit.get('sbscripted')
  const [a, b, g] = requests.map((r) => r.headers['idempotency-key'])
  assert.notEqual(a, b)
  assert.equal(g, undefined)
  assert.equal(requests[0].headers.authorization, 'Bearer tok')

  const once = await scripted(t, [[503, 'unavailable'], [201]])
  const noRetry = new Sandpit({ apiUrl: once.sandpit.apiUrl, token: 'tok', retry: { maxAttempts: 1 } })
  await assert.rejects(noRetry.create(), (err) => err instanceof SandpitError && err.status === 503)
  assert.equal(once.requests.length, 1)
})

test('retries: a daemon that never answers is a NetworkError after the attempts', async () => {
  const s = new Sandpit({ apiUrl: '127.0.0.1:1', token: 'tok', retry: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 2 } })
  await assert.rejects(s.create(), (err) => err instanceof NetworkError && err.status === 0 && err.code === 'network')
})

test('the client falls back to SANDPIT_ADDR and SANDPIT_TOKEN', () => {
  const saved = { addr: process.env.SANDPIT_ADDR, token: process.env.SANDPIT_TOKEN }
  try {
    process.env.SANDPIT_ADDR = '10.1.2.3:7420/'
    process.env.SANDPIT_TOKEN = 'env-token'
    assert.equal(new Sandpit().apiUrl, 'http://10.1.2.3:7420')
    delete process.env.SANDPIT_TOKEN
    assert.throws(() => new Sandpit(), /SANDPIT_TOKEN/)
  } finally {
    for (const [k, v] of [['SANDPIT_ADDR', saved.addr], ['SANDPIT_TOKEN', saved.token]]) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
})

test('events: parses the stream, reconnects after a cut with Last-Event-ID', async (t) => {
  const { sandpit, requests } = await scripted(t, [
    (req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(': hello\n\n')
      res.write('id: 1\ndata: {"type":"created","sandbox_id":"sb1","state":"running","old_state":"creating","time":"2026-01-02T03:04:05Z"}\n\n')
      // An event split across writes, with CRLF line ends and two data lines.
      res.write('event: stopped\r\nid: 2\r\ndata: {"sandbox_id":"sb1",\r\n')
      res.end('data: "state":"stopped"}\r\n\r\n')
    },
    (req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: not json\n\n')
    },
  ])
  const got = []
  for await (const ev of sandpit.events()) {
    got.push(ev)
    if (got.length === 3) break
  }
  assert.deepEqual(got, [
    {
      type: 'created', id: '1', sandboxId: 'sb1', state: 'running', oldState: 'creating', time: new Date('2026-01-02T03:04:05Z'),
      data: { type: 'created', sandbox_id: 'sb1', state: 'running', old_state: 'creating', time: '2026-01-02T03:04:05Z' },
    },
    { type: 'stopped', id: '2', sandboxId: 'sb1', state: 'stopped', data: { sandbox_id: 'sb1', state: 'stopped' } },
    { type: 'message', id: undefined, data: 'not json' },
  ])
  assert.equal(requests[0].headers.accept, 'text/event-stream')
  assert.equal(requests[0].headers['last-event-id'], undefined)
  assert.equal(requests[1].headers['last-event-id'], '2')
})

test('events: a template build event carries the template and the build, no sandbox', async (t) => {
  const { sandpit } = await scripted(t, [
    (req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end('event: template.error\ndata: {"type":"template.error","sandbox_id":"","state":"error","old_state":"",' +
        '"time":"2026-01-02T03:04:05Z","template_id":"tpl1","template":"py","build_id":"bld1","error":"exit code 3"}\n\n')
    },
  ])
  for await (const ev of sandpit.events()) {
    assert.equal(ev.type, 'template.error')
    assert.equal(ev.sandboxId, '')
    assert.equal(ev.state, 'error')
    assert.deepEqual([ev.templateId, ev.template, ev.buildId, ev.error], ['tpl1', 'py', 'bld1', 'exit code 3'])
    break
  }
})

test('events: a daemon without /v1/events is a NotFoundError', async (t) => {
  const { sandpit } = await scripted(t, [[404, 'not_found']])
  await assert.rejects(sandpit.events().next(), NotFoundError)
})
