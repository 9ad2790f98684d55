// The official @e2b/desktop SDK, unmodified, in the drop-in configuration
// (see dropin.mjs: --tls internal, E2B_DOMAIN and E2B_API_KEY only) against
// the desktop template (images/desktop, scripts/build-desktop-image.sh).
// The SDK has no server API of its own: Sandbox.create() asks for the
// template `desktop` and then drives Xvfb, Xfce, xdotool, scrot, x11vnc and
// noVNC through envd's commands and files, so this shows that the image
// has every program where the SDK looks for it and that the daemon serves
// the stream: its https URL answers noVNC's page through the preview proxy
// and its WebSocket path reaches the VNC server.
//
// The image takes minutes to build: the parent waits for it (see
// ../desktop-image.mjs) before it starts the daemon, so that the daemon
// serves the template from its start.

import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import tls from 'node:tls'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import puppeteer from 'puppeteer-core'
import { Sandbox } from '@e2b/desktop'
import { dropInSuite, isChild } from './dropin.mjs'
import { sleep, runId } from './helpers.mjs'
import { desktopImage } from '../desktop-image.mjs'

const T = 600_000
// The stream is watched in Debian's Chromium, as test/ui drives it, and its
// screenshot kept as an artefact (SANDPIT_ARTIFACTS, default
// test/e2b/artifacts).
const chromium = process.env.CHROMIUM || ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find(existsSync)
const artifacts = process.env.SANDPIT_ARTIFACTS || join(dirname(fileURLToPath(import.meta.url)), 'artifacts')

if (!isChild) before(desktopImage, { timeout: 3_600_000 })

dropInSuite(import.meta.url, '@e2b/desktop', T, cases)

// Every create names its test: the daemon treats identical creates within
// a few seconds as one request retried.
const uniq = (tag) => ({ metadata: { test: `${tag}-${randomBytes(4).toString('hex')}`, run: runId } })

async function until(what, check, ms = 60_000) {
  const deadline = Date.now() + ms
  for (;;) {
    const err = await check().catch((e) => `${e}`)
    if (!err) return
    if (Date.now() > deadline) throw new Error(`${what}: ${err}`)
    await sleep(250)
  }
}

// pngSize reads a PNG's width and height from its IHDR chunk, after
// checking the signature.
function pngSize(bytes) {
  const b = Buffer.from(bytes)
  assert.deepEqual([...b.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'not a PNG')
  assert.equal(b.subarray(12, 16).toString('latin1'), 'IHDR')
  return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) }
}

// count is how many processes of that exact name run in the sandbox.
async function count(sbx, name) {
  const r = await sbx.commands.run(`pgrep -c -x ${name} || true`)
  return Number(r.stdout.trim())
}

// listeners is how many sockets listen on the sandbox's TCP port.
async function listeners(sbx, port) {
  const r = await sbx.commands.run(`netstat -tln | grep -c ':${port} ' || true`)
  return Number(r.stdout.trim())
}

// rfbOverWebSocket opens a WebSocket to url (wss://) as noVNC does, with
// the "binary" subprotocol, and speaks the first steps of RFB to the VNC
// server behind it: the server's version, the client's, and the security
// types the server offers (1 is none, 2 is VNC password authentication).
// The handshake is done by hand over TLS, trusting what the process trusts
// (the daemon's CA through NODE_EXTRA_CA_CERTS).
async function rfbOverWebSocket(url) {
  const u = new URL(url)
  const key = randomBytes(16).toString('base64')
  const sock = tls.connect({ host: '127.0.0.1', port: Number(u.port), servername: u.hostname })
  await new Promise((resolve, reject) => { sock.once('secureConnect', resolve); sock.once('error', reject) })
  let buf = Buffer.alloc(0)
  const waiters = []
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d])
    for (const w of waiters.splice(0)) w()
  })
  const more = () => new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer; got ${JSON.stringify(buf.toString('latin1'))}`)), 20_000)
    waiters.push(() => { clearTimeout(timer); resolve() })
  })
  try {
    sock.write([
      `GET ${u.pathname}${u.search} HTTP/1.1`, `Host: ${u.host}`, 'Upgrade: websocket', 'Connection: Upgrade',
      `Sec-WebSocket-Key: ${key}`, 'Sec-WebSocket-Version: 13', 'Sec-WebSocket-Protocol: binary', `Origin: https://${u.host}`, '', '',
    ].join('\r\n'))
    while (!buf.includes('\r\n\r\n')) await more()
    const end = buf.indexOf('\r\n\r\n')
    const head = buf.subarray(0, end).toString('latin1')
    buf = buf.subarray(end + 4)
    // One unmasked binary frame from the server (payloads here are short).
    const frame = async () => {
      for (;;) {
        if (buf.length >= 2) {
          let len = buf[1] & 0x7f
          let off = 2
          if (len === 126) { len = buf.length >= 4 ? buf.readUInt16BE(2) : Infinity; off = 4 }
          if (buf.length >= off + len) {
            const payload = buf.subarray(off, off + len)
            buf = buf.subarray(off + len)
            return payload
          }
        }
        await more()
      }
    }
    const status = head.split('\r\n')[0]
    if (!status.includes(' 101 ')) return { status, head }
    const version = (await frame()).toString('latin1')
    // The client's version, in a masked binary frame.
    const mask = randomBytes(4)
    const body = Buffer.from('RFB 003.008\n', 'latin1')
    sock.write(Buffer.concat([Buffer.from([0x82, 0x80 | body.length]), mask, Buffer.from(body.map((c, i) => c ^ mask[i % 4]))]))
    let types = await frame()
    while (types.length < 1 || types.length < 1 + types[0]) types = Buffer.concat([types, await frame()])
    return { status, head, version, securityTypes: [...types.subarray(1, 1 + types[0])] }
  } finally {
    sock.destroy()
  }
}

function cases() {
  let sbx

  test('Sandbox.create() starts the desktop: Xvfb, Xfce, DISPLAY :0, the requested size', async () => {
    assert.ok(process.env.E2B_DOMAIN && !process.env.E2B_API_URL)
    sbx = await Sandbox.create({ ...uniq('desktop'), resolution: [1024, 768], timeoutMs: 900_000 })
    assert.equal((await sbx.getInfo()).templateId, 'desktop')
    assert.equal((await sbx.commands.run('echo $DISPLAY')).stdout.trim(), ':0')
    for (const p of ['Xvfb', 'xfce4-session', 'xfwm4', 'xfdesktop']) assert.equal(await count(sbx, p), 1, p)
    assert.deepEqual(await sbx.getScreenSize(), { width: 1024, height: 768 })
  })

  test('screenshot() is a PNG of the screen\'s size, and the SDK\'s file in the sandbox is removed', async () => {
    const png = await sbx.screenshot()
    assert.ok(png instanceof Uint8Array)
    assert.deepEqual(pngSize(png), { width: 1024, height: 768 })
    assert.ok(png.length > 1000, `${png.length} bytes`)
    // The SDK removes its file after reading it.
    await until('the screenshot file removed', async () => {
      const r = await sbx.commands.run('ls /tmp | grep -c "^screenshot-" || true')
      return r.stdout.trim() === '0' ? null : `${r.stdout.trim()} left`
    }, 10_000)
  })

  test('moveMouse lands where asked; getCursorPosition reads it back', async () => {
    for (const [x, y] of [[100, 200], [640, 400], [1, 1]]) {
      await sbx.moveMouse(x, y)
      assert.deepEqual(await sbx.getCursorPosition(), { x, y })
    }
  })

  test('launch a terminal, see its window, click it, write and press Enter: the typed command runs', async () => {
    await sbx.launch('xfce4-terminal')
    let wins = []
    await until('an xfce4-terminal window', async () => {
      wins = (await sbx.getApplicationWindows('xfce4-terminal')).filter(Boolean)
      return wins.length > 0 ? null : 'none'
    })
    const title = await sbx.getWindowTitle(wins[0])
    assert.ok(title.length > 0, 'the window has a title')
    // The centre of the terminal window, from xdotool's geometry.
    const g = Object.fromEntries((await sbx.commands.run(`xdotool getwindowgeometry --shell ${wins[0]}`)).stdout
      .trim().split('\n').map((l) => l.split('=')).map(([k, v]) => [k, Number(v)]))
    const cx = g.X + Math.floor(g.WIDTH / 2)
    const cy = g.Y + Math.floor(g.HEIGHT / 2)
    await sbx.leftClick(cx, cy)
    assert.deepEqual(await sbx.getCursorPosition(), { x: cx, y: cy })
    await until('the terminal focused', async () => {
      const focused = await sbx.getCurrentWindowId()
      const name = await sbx.getWindowTitle(focused).catch(() => '')
      return name === title ? null : `focused ${focused} (${name}), want ${title}`
    }, 20_000)
    const before = Buffer.from(await sbx.screenshot())
    await sbx.write('echo "typed $((6 * 7))" > /tmp/typed.txt')
    await sbx.press('enter')
    await until('the typed command ran', async () => {
      const r = await sbx.commands.run('cat /tmp/typed.txt 2>/dev/null || true')
      return r.stdout === 'typed 42\n' ? null : JSON.stringify(r.stdout)
    }, 30_000)
    // Keys map through the SDK's names: ctrl+l clears the terminal.
    await sbx.press(['ctrl', 'l'])
    const after = Buffer.from(await sbx.screenshot())
    assert.ok(!before.equals(after), 'typing changed the screen')
  })

  test('open() a page: the default browser (Chromium) shows it in a window of its own', async () => {
    await sbx.files.write('/home/user/page.html', '<!doctype html><title>sandpit-open-page</title><p>hello</p>')
    await sbx.open('/home/user/page.html')
    await until('a Chromium window titled after the page', async () => {
      const wins = (await sbx.getApplicationWindows('chromium').catch(() => [])).filter(Boolean)
      const titles = await Promise.all(wins.map((w) => sbx.getWindowTitle(w).catch(() => '')))
      return titles.some((t) => t.includes('sandpit-open-page')) ? null : JSON.stringify(titles)
    }, 120_000)
  })

  test('stream without auth: https getUrl serves noVNC, its WebSocket reaches the VNC server (no password)', async () => {
    await sbx.stream.start()
    const url = sbx.stream.getUrl()
    const u = new URL(url)
    assert.equal(u.protocol, 'https:')
    assert.equal(u.host, sbx.getHost(6080))
    assert.equal(u.pathname, '/vnc.html')
    assert.equal(u.searchParams.get('autoconnect'), 'true')
    assert.equal(u.searchParams.get('resize'), 'scale')
    const res = await fetch(url)
    assert.equal(res.status, 200)
    assert.match(await res.text(), /noVNC/)
    // The page's own script and the path its WebSocket connects to.
    assert.equal((await fetch(new URL('/app/ui.js', url))).status, 200)
    const rfb = await rfbOverWebSocket(`wss://${u.host}/websockify`)
    assert.equal(rfb.status.split(' ')[1], '101', rfb.head)
    assert.match(rfb.version, /^RFB 003\.00\d\n$/)
    assert.deepEqual(rfb.securityTypes, [1])
    // One VNC server; a second start while it runs is refused by the SDK
    // and starts nothing. (The WebSocket bridge forks a process per
    // connection, so it is seen by its listening socket, not counted.)
    assert.equal(await count(sbx, 'x11vnc'), 1)
    await assert.rejects(sbx.stream.start(), /already running/)
    assert.equal(await count(sbx, 'x11vnc'), 1)
    assert.ok(await listeners(sbx, 6080) > 0)
    // stop() ends both: x11vnc with pkill, the bridge by killing the
    // command that started it (its process group).
    await sbx.stream.stop()
    await until('the stream stopped', async () => {
      const left = [await count(sbx, 'x11vnc'), await listeners(sbx, 6080)]
      return left[0] + left[1] === 0 ? null : `x11vnc ${left[0]}, port 6080 listened on ${left[1]} times`
    }, 20_000)
  })

  test('stream with requireAuth: the URL carries the key and the VNC server asks for a password', async () => {
    await sbx.stream.start({ requireAuth: true })
    const key = sbx.stream.getAuthKey()
    assert.match(key, /^[A-Za-z0-9]{16}$/)
    const url = sbx.stream.getUrl({ authKey: key, viewOnly: true })
    const u = new URL(url)
    assert.equal(u.protocol, 'https:')
    assert.equal(u.searchParams.get('password'), key)
    assert.equal(u.searchParams.get('view_only'), 'true')
    const res = await fetch(url)
    assert.equal(res.status, 200)
    assert.match(await res.text(), /noVNC/)
    const rfb = await rfbOverWebSocket(`wss://${u.host}/websockify`)
    assert.equal(rfb.status.split(' ')[1], '101', rfb.head)
    assert.deepEqual(rfb.securityTypes, [2], 'VNC authentication only')
    await sbx.stream.stop()
    await until('the stream stopped', async () => {
      const left = [await count(sbx, 'x11vnc'), await listeners(sbx, 6080)]
      return left[0] + left[1] === 0 ? null : `x11vnc ${left[0]}, port 6080 listened on ${left[1]} times`
    }, 20_000)
  })

  test('a headless Chromium that opens the stream URL connects and shows the desktop', async () => {
    assert.ok(chromium, 'Debian chromium is not installed (apt-get install chromium), or set CHROMIUM')
    await sbx.stream.start({ requireAuth: true })
    const url = sbx.stream.getUrl({ authKey: sbx.stream.getAuthKey() })
    const u = new URL(url)
    const browser = await puppeteer.launch({
      executablePath: chromium,
      headless: true,
      // The daemon's CA is trusted by node (NODE_EXTRA_CA_CERTS), not by
      // Chromium; the test domain resolves to loopback as for node.
      args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--ignore-certificate-errors',
        `--host-resolver-rules=MAP *.${u.hostname.split('.').slice(-2).join('.')} 127.0.0.1`],
    })
    try {
      const page = await browser.newPage()
      let said = []
      let networkChanged = false
      page.on('console', (m) => said.push(`console ${m.type()}: ${m.text()}`))
      page.on('pageerror', (e) => said.push(`page error: ${e}`))
      page.on('requestfailed', (r) => {
        said.push(`request failed: ${r.url()} ${r.failure()?.errorText}`)
        networkChanged ||= r.failure()?.errorText === 'net::ERR_NETWORK_CHANGED'
      })
      await page.setViewport({ width: 1024, height: 768 })
      mkdirSync(artifacts, { recursive: true })
      // noVNC marks the page connected once the VNC password was accepted
      // and the first frame drawn. Chromium aborts what it is loading when
      // the host's network interfaces change (ERR_NETWORK_CHANGED), which
      // the engine does whenever a sandbox of a test running beside this
      // one starts or ends; then, and only then, the page is loaded again.
      for (let attempt = 1; ; attempt++) {
        said = []
        networkChanged = false
        try {
          await page.goto(url, { waitUntil: 'load' })
        } catch (err) {
          if (/ERR_NETWORK_CHANGED/.test(err.message) && attempt < 4) continue
          throw err
        }
        try {
          await page.waitForFunction(() => document.documentElement.classList.contains('noVNC_connected'), { timeout: 30_000 })
          break
        } catch (err) {
          if (networkChanged && attempt < 4) continue
          await page.screenshot({ path: join(artifacts, 'desktop-stream-failed.png') })
          const status = await page.evaluate(() => `${document.documentElement.className} | ${document.getElementById('noVNC_status')?.textContent}`)
          throw new Error(`noVNC did not connect (${status}): ${err.message}\n${said.join('\n')}`)
        }
      }
      // The canvas is the remote screen: its size, and more than one colour.
      const canvas = await page.waitForFunction(() => {
        const c = document.querySelector('#noVNC_container canvas')
        if (!c || c.width !== 1024 || c.height !== 768) return null
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data
        const colours = new Set()
        for (let i = 0; i < px.length; i += 4 * 997) colours.add((px[i] << 16) | (px[i + 1] << 8) | px[i + 2])
        return colours.size > 4 ? { width: c.width, height: c.height, colours: colours.size } : null
      }, { timeout: 60_000 })
      const seen = await canvas.jsonValue()
      assert.equal(seen.width, 1024)
      await page.screenshot({ path: join(artifacts, 'desktop-stream.png') })
    } finally {
      await browser.close()
      await sbx.stream.stop()
    }
  })

  test('kill', async () => {
    assert.equal(await sbx.kill(), true)
  })
}
