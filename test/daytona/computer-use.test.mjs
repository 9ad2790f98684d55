// Daytona's computer use through the official SDK, unmodified, on a real
// daemon and Docker: a sandbox from the `desktop` snapshot (images/desktop,
// scripts/build-desktop-image.sh), sandbox.computerUse's start, status,
// processes, screenshots (full, region, compressed), mouse, keyboard,
// display and recordings, all served by the toolbox running the X11 tools
// and ffmpeg in the sandbox.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { openSuite, closeSuite, proxyGet } from './daemon.mjs';
import { desktopImage } from '../desktop-image.mjs';

let d;
let daytona;
let sb;
const suite = 'computer-use-' + randomBytes(4).toString('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  await desktopImage();
  ({ d, daytona } = await openSuite());
  sb = await daytona.create({ snapshot: 'desktop', labels: { suite } }, { timeout: 300 });
}, { timeout: 3_600_000 });

after(() => closeSuite({ d, daytona, sb }));

async function until(what, check, ms = 60_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const err = await check().catch((e) => `${e}`);
    if (!err) return;
    if (Date.now() > deadline) throw new Error(`${what}: ${err}`);
    await sleep(250);
  }
}

// image decodes a screenshot's base64 and reads its format and size (PNG's
// IHDR; JPEG's first start-of-frame).
function image(b64) {
  const b = Buffer.from(b64, 'base64');
  if (b.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) {
    return { format: 'png', width: b.readUInt32BE(16), height: b.readUInt32BE(20), bytes: b.length };
  }
  if (b[0] === 0xff && b[1] === 0xd8) {
    for (let i = 2; i + 9 < b.length;) {
      if (b[i] !== 0xff) throw new Error(`bad JPEG marker at ${i}`);
      const marker = b[i + 1];
      const len = b.readUInt16BE(i + 2);
      if (marker >= 0xc0 && marker <= 0xc3) return { format: 'jpeg', width: b.readUInt16BE(i + 7), height: b.readUInt16BE(i + 5), bytes: b.length };
      i += 2 + len;
    }
  }
  throw new Error(`not a PNG or JPEG: ${b.subarray(0, 8).toString('hex')}`);
}

// count is how many processes of that exact name run in the sandbox.
async function count(name) {
  const r = await sb.process.executeCommand(`pgrep -c -x ${name} || true`);
  return Number(r.result.trim());
}

test('computerUse.start() starts the desktop; concurrent and repeated starts leave one process of each kind', { timeout: 300_000 }, async () => {
  assert.equal(sb.snapshot, 'desktop');
  assert.equal((await sb.computerUse.getStatus()).status, 'inactive');
  // Two starts at once, as a client retrying a start it thinks was lost.
  const [started] = await Promise.all([sb.computerUse.start(), sb.computerUse.start()]);
  assert.match(started.message, /started/);
  for (const name of ['xvfb', 'xfce4', 'x11vnc', 'novnc']) {
    assert.equal(started.status[name].running, true, `${name}: ${JSON.stringify(started.status)}`);
    assert.ok(started.status[name].pid > 0);
  }
  assert.equal((await sb.computerUse.getStatus()).status, 'active');
  await sb.computerUse.start();
  for (const exe of ['Xvfb', 'xfce4-session', 'x11vnc', 'websockify']) assert.equal(await count(exe), 1, exe);
  // The session is up once its window manager and desktop are.
  await until('xfwm4 and xfdesktop', async () => (await count('xfwm4')) === 1 && (await count('xfdesktop')) === 1 ? null : 'not yet');
  assert.deepEqual(await sb.computerUse.getProcessStatus('xvfb'), { processName: 'xvfb', running: true });
  const errs = await sb.computerUse.getProcessErrors('novnc');
  assert.equal(errs.processName, 'novnc');
  assert.equal(typeof errs.errors, 'string');
});

test('display.getInfo and getWindows describe the screen', { timeout: 120_000 }, async () => {
  const info = await sb.computerUse.display.getInfo();
  assert.deepEqual(info.displays, [{ id: 0, x: 0, y: 0, width: 1024, height: 768, isActive: true }]);
  const { windows } = await sb.computerUse.display.getWindows();
  assert.ok(windows.length > 0, 'Xfce has windows (its panel, its desktop)');
  for (const w of windows) assert.equal(typeof w.id, 'number');
});

test('screenshots: full and region are PNGs of their size; compressed is a scaled JPEG', { timeout: 120_000 }, async () => {
  await sb.computerUse.mouse.move(50, 60);
  const full = await sb.computerUse.screenshot.takeFullScreen(true);
  assert.deepEqual(image(full.screenshot), { format: 'png', width: 1024, height: 768, bytes: full.sizeBytes });
  assert.deepEqual(full.cursorPosition, { x: 50, y: 60 });
  // The SDK's takeRegion (0.218) hands its region to the API client in
  // reverse order (height, width, y, x), so through it only a region whose
  // four numbers are equal comes out as asked, as against Daytona itself.
  const region = await sb.computerUse.screenshot.takeRegion({ x: 100, y: 100, width: 100, height: 100 });
  assert.deepEqual(image(region.screenshot), { format: 'png', width: 100, height: 100, bytes: region.sizeBytes });
  // The endpoint itself takes each number as named.
  const res = await fetch(`${d.apiUrl}/toolbox/${sb.id}/computeruse/screenshot/region?x=10&y=20&width=200&height=100`, { headers: { Authorization: `Bearer ${d.token}` } });
  assert.equal(res.status, 200);
  const raw = await res.json();
  assert.deepEqual(image(raw.screenshot), { format: 'png', width: 200, height: 100, bytes: raw.sizeBytes });
  const small = await sb.computerUse.screenshot.takeCompressed({ format: 'jpeg', quality: 60, scale: 0.5 });
  assert.deepEqual(image(small.screenshot), { format: 'jpeg', width: 512, height: 384, bytes: small.sizeBytes });
  const part = await sb.computerUse.screenshot.takeCompressedRegion({ x: 0, y: 0, width: 400, height: 300 }, { format: 'png', scale: 0.5 });
  assert.deepEqual(image(part.screenshot), { format: 'png', width: 200, height: 150, bytes: part.sizeBytes });
  await assert.rejects(sb.computerUse.screenshot.takeCompressed({ format: 'gif' }), (e) => e.statusCode === 400);
});

test('mouse: move, getPosition, click, drag and scroll land where asked', { timeout: 120_000 }, async () => {
  assert.deepEqual(await sb.computerUse.mouse.move(300, 400), { x: 300, y: 400 });
  assert.deepEqual(await sb.computerUse.mouse.getPosition(), { x: 300, y: 400 });
  assert.deepEqual(await sb.computerUse.mouse.click(500, 300), { x: 500, y: 300 });
  assert.deepEqual(await sb.computerUse.mouse.click(510, 310, 'left', true), { x: 510, y: 310 });
  assert.deepEqual(await sb.computerUse.mouse.drag(100, 100, 200, 150), { x: 200, y: 150 });
  assert.equal(await sb.computerUse.mouse.scroll(400, 400, 'down', 3), true);
  assert.deepEqual(await sb.computerUse.mouse.getPosition(), { x: 400, y: 400 });
  await assert.rejects(sb.computerUse.mouse.click(1, 1, 'thumb'), (e) => e.statusCode === 400);
});

test('keyboard: typing into a terminal runs the command; press and hotkey send keys', { timeout: 180_000 }, async () => {
  await sb.process.executeCommand('DISPLAY=:0 setsid xfce4-terminal >/dev/null 2>&1 < /dev/null &');
  let term;
  await until('a terminal window', async () => {
    const { windows } = await sb.computerUse.display.getWindows();
    term = windows.find((w) => /Terminal/.test(w.title));
    return term ? null : JSON.stringify(windows.map((w) => w.title));
  });
  await sb.computerUse.mouse.click(term.x + Math.floor(term.width / 2), term.y + Math.floor(term.height / 2));
  await until('the terminal active', async () => {
    const { windows } = await sb.computerUse.display.getWindows();
    return windows.some((w) => w.id === term.id && w.isActive) ? null : JSON.stringify(windows);
  }, 20_000);
  const before = (await sb.computerUse.screenshot.takeFullScreen()).screenshot;
  await sb.computerUse.keyboard.type('echo "cu $((6 * 7))" > /tmp/cu.txt');
  await sb.computerUse.keyboard.press('enter');
  await until('the typed command ran', async () => {
    const r = await sb.process.executeCommand('cat /tmp/cu.txt 2>/dev/null || true');
    return r.result.trim() === 'cu 42' ? null : JSON.stringify(r.result);
  }, 30_000);
  const after = (await sb.computerUse.screenshot.takeFullScreen()).screenshot;
  assert.notEqual(after, before, 'typing changed the screen');
  // ctrl+shift+t opens a tab in xfce4-terminal: one window, titled alike.
  await sb.computerUse.keyboard.hotkey('ctrl+shift+t');
  await sb.computerUse.keyboard.type('echo tab > /tmp/tab.txt\n');
  await until('the command typed in the new tab ran', async () => {
    const r = await sb.process.executeCommand('cat /tmp/tab.txt 2>/dev/null || true');
    return r.result.trim() === 'tab' ? null : JSON.stringify(r.result);
  }, 30_000);
  await sb.computerUse.keyboard.press('l', ['ctrl']);
  await assert.rejects(sb.computerUse.keyboard.press('no such key!'), (e) => e.statusCode === 400);
});

test('noVNC answers on port 6080 through the preview proxy', { timeout: 60_000 }, async () => {
  const link = await sb.getPreviewLink(6080);
  const host = new URL(link.url).host;
  let res;
  await until('vnc.html', async () => {
    res = await proxyGet(d.proxyPort, host, '/vnc.html', { 'x-daytona-preview-token': link.token });
    return res.status === 200 ? null : `${res.status} ${res.body.slice(0, 200)}`;
  }, 20_000);
  assert.match(res.body, /noVNC/);
});

test('recordings: start, list, stop, get, download a video with a duration, delete', { timeout: 180_000 }, async () => {
  const started = await sb.computerUse.recording.start('demo run');
  assert.equal(started.status, 'recording');
  assert.match(started.fileName, new RegExp(`^${started.id}_demo run_\\d{8}_\\d{6}\\.mp4$`));
  assert.ok(started.filePath.endsWith(`/.daytona/recordings/${started.fileName}`), started.filePath);
  assert.ok((await sb.computerUse.recording.list()).recordings.some((r) => r.id === started.id && r.status === 'recording'));
  for (let i = 0; i < 4; i++) {
    await sb.computerUse.mouse.move(100 + 100 * i, 100 + 50 * i);
    await sleep(500);
  }
  const stopped = await sb.computerUse.recording.stop(started.id);
  assert.equal(stopped.status, 'completed');
  assert.ok(stopped.durationSeconds >= 1.5, `duration ${stopped.durationSeconds}`);
  assert.ok(stopped.sizeBytes > 0);
  assert.deepEqual(await sb.computerUse.recording.get(started.id), stopped);
  await assert.rejects(sb.computerUse.recording.stop(started.id), (e) => e.statusCode === 400);

  const local = join(mkdtempSync(join(tmpdir(), 'sandpit-rec-')), 'rec.mp4');
  await sb.computerUse.recording.download(started.id, local);
  const bytes = readFileSync(local);
  assert.equal(bytes.length, stopped.sizeBytes);
  assert.equal(bytes.subarray(4, 8).toString('latin1'), 'ftyp', 'an MP4 file');
  // ffprobe (in the image) reads it as an H.264 video with a duration.
  await sb.fs.uploadFile(bytes, '/tmp/downloaded.mp4');
  const probe = await sb.process.executeCommand('ffprobe -v error -show_entries format=duration:stream=codec_name,width,height -of json /tmp/downloaded.mp4');
  assert.equal(probe.exitCode, 0, probe.result);
  const info = JSON.parse(probe.result);
  assert.equal(info.streams[0].codec_name, 'h264');
  assert.equal(info.streams[0].width, 1024);
  assert.ok(Number(info.format.duration) > 1, info.format.duration);
  rmSync(dirname(local), { recursive: true, force: true });

  await sb.computerUse.recording.delete(started.id);
  await assert.rejects(sb.computerUse.recording.get(started.id), (e) => e.statusCode === 404);
  assert.ok(!(await sb.computerUse.recording.list()).recordings.some((r) => r.id === started.id));
  await assert.rejects(sb.computerUse.recording.start('../escape'), (e) => e.statusCode === 400);
});

test('the accessibility tree is refused with 501, saying what is served', { timeout: 60_000 }, async () => {
  await assert.rejects(sb.computerUse.accessibility.getTree(), (e) => e.statusCode === 501 && /accessibility/.test(e.message));
});

test('restartProcess, then stop: everything ends and input is refused until the next start', { timeout: 180_000 }, async () => {
  const restarted = await sb.computerUse.restartProcess('x11vnc');
  assert.equal(restarted.processName, 'x11vnc');
  await until('x11vnc back', async () => (await sb.computerUse.getProcessStatus('x11vnc')).running ? null : 'not running');
  assert.equal(await count('x11vnc'), 1);
  await assert.rejects(sb.computerUse.getProcessStatus('nope'), (e) => e.statusCode === 404);
  const stopped = await sb.computerUse.stop();
  for (const name of ['xvfb', 'xfce4', 'x11vnc', 'novnc']) assert.equal(stopped.status[name].running, false, name);
  assert.equal((await sb.computerUse.getStatus()).status, 'inactive');
  await assert.rejects(sb.computerUse.screenshot.takeFullScreen(), (e) => e.statusCode === 409 && /start/.test(e.message));
});
