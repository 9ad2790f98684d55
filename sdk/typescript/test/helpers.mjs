// Helpers of the SDK's tests. Daemons are started, labelled and cleaned up by
// the E2B suite's helpers (one binary built per run, every container tagged
// with this run's label and removed at teardown); this file adds what only
// these tests need: a client for a daemon, a TCP proxy that loses an answer,
// and an HTTP GET that reaches preview URLs on this machine.

import { createServer, connect } from 'node:net'
import { request } from 'node:http'
import { randomBytes } from 'node:crypto'

import { Sandpit } from '../dist/index.js'

export { setup, teardown, startDaemon, containers, freePort, sleep } from '../../../test/e2b/helpers.mjs'

export const unique = (prefix) => `${prefix}-${randomBytes(4).toString('hex')}`

// baseUrl is a test daemon's native API root.
export const baseUrl = (d) => `http://127.0.0.1:${d.apiPort}`

// client returns an SDK client of a daemon (or of a proxy in front of it).
// The short backoff keeps retried tests quick.
export function client(d, url = baseUrl(d), token = d.token) {
  return new Sandpit({ apiUrl: url, token, retry: { baseDelayMs: 20, maxDelayMs: 200 } })
}

// freeRange finds n consecutive free loopback ports for a daemon's
// --port-range. Like freePort it leaves a small window for a clash.
export async function freeRange(n) {
  for (let tries = 0; tries < 50; tries++) {
    const lo = 20000 + Math.floor(Math.random() * 20000)
    const ok = await Promise.all(Array.from({ length: n }, (_, i) => canListen(lo + i)))
    if (ok.every(Boolean)) return `${lo}-${lo + n - 1}`
  }
  throw new Error(`no ${n} consecutive free ports`)
}

function canListen(port) {
  return new Promise((resolve) => {
    const srv = createServer()
    srv.once('error', () => resolve(false))
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)))
  })
}

// lossyProxy forwards TCP connections to a daemon and records the request
// line and Idempotency-Key of every request it sees. The first request for
// which drop(method, path) is true is forwarded, but its answer is thrown
// away and the connection closed: the daemon did the work, the client never
// learns it.
export async function lossyProxy(d, drop) {
  const seen = []
  let armed = true
  const sockets = new Set()
  const server = createServer((downstream) => {
    const upstream = connect(d.apiPort, '127.0.0.1')
    sockets.add(downstream).add(upstream)
    let doomed = false
    downstream.on('data', (buf) => {
      const head = buf.toString('latin1')
      const line = /^([A-Z]+) (\S+) HTTP\/1\.[01]\r\n/.exec(head)
      if (line) {
        const key = /\r\nidempotency-key: *([^\r]*)\r\n/i.exec(head)?.[1]
        seen.push({ method: line[1], path: line[2], key })
        if (armed && drop(line[1], line[2])) {
          armed = false
          doomed = true
        }
      }
      upstream.write(buf)
    })
    upstream.on('data', (buf) => {
      if (doomed) {
        downstream.destroy()
        upstream.destroy()
        return
      }
      downstream.write(buf)
    })
    const close = () => {
      downstream.destroy()
      upstream.destroy()
      sockets.delete(downstream)
      sockets.delete(upstream)
    }
    for (const s of [downstream, upstream]) {
      s.on('error', close)
      s.on('close', close)
    }
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    dropped: () => !armed,
    close: () => {
      for (const s of sockets) s.destroy()
      return new Promise((resolve) => server.close(resolve))
    },
  }
}

// get fetches a URL, sending the request to 127.0.0.1 whatever the host
// name: preview URLs name <id>-<port>.localhost, which the resolver of a CI
// machine need not know.
export function get(url) {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: u.port || 80, path: u.pathname + u.search, headers: { host: u.host } }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

// eventually retries fn until it stops throwing or the attempts run out.
export async function eventually(fn, attempts = 50, delayMs = 100) {
  for (let i = 1; ; i++) {
    try {
      return await fn()
    } catch (err) {
      if (i >= attempts) throw err
      await new Promise((r) => setTimeout(r, delayMs))
    }
  }
}
