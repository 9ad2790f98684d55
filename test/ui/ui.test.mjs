// Drives the /ui dashboard in Debian's headless Chromium against a real
// daemon, as an operator would: the sign-in page, the live list, the exec
// box, the readable figures, a create with env, limits and validation, a
// terminal session typed through the page (xterm over the PTY WebSocket),
// stats with units, logs, files (list, upload, download), exposing a port,
// stop and start, pause and resume, a delete that is first cancelled and
// then confirmed, the event feed, the admin panels, the view of a personal
// token (its owner's sandboxes only), templates, and a cluster's members.
// Screenshots of each step are kept as artefacts (SANDPIT_ARTIFACTS,
// default test/ui/artifacts). No assertion is timed: every wait is for a
// condition.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, existsSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

import { startDaemon } from '../daytona/daemon.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const artifacts = process.env.SANDPIT_ARTIFACTS || join(here, 'artifacts');
const chromium = process.env.CHROMIUM || ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find(existsSync);

let daemon;
let browser;

before(async () => {
  assert.ok(chromium, 'Debian chromium is not installed (apt-get install chromium), or set CHROMIUM');
  mkdirSync(artifacts, { recursive: true });
  daemon = await startDaemon();
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // Root in a container has no user namespace sandbox to give Chromium.
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
});

after(async () => {
  await browser?.close();
  await daemon?.stop();
});

async function api(method, path, body, token = daemon.token, base = daemon.base) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed = text;
  try { parsed = text ? JSON.parse(text) : null; } catch { /* raw */ }
  return { status: res.status, body: parsed };
}

// newPage opens the dashboard and collects what the page reports as
// errors; expected ones (a refused token's 401) are cleared by the test.
async function newPage(base = daemon.base) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  // Waits are for conditions; the bound only keeps a broken page from
  // hanging the suite, and is generous for a loaded CI machine.
  page.setDefaultTimeout(120_000);
  const problems = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    if (process.env.SANDPIT_LOG) process.stderr.write(`browser ${msg.type()}: ${msg.text()}\n`);
    if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
  });
  page.on('dialog', (d) => {
    problems.push(`unexpected alert: ${d.message()}`);
    d.dismiss();
  });
  const res = await page.goto(`${base}/ui`, { waitUntil: 'networkidle0' });
  assert.equal(res.status(), 200);
  return { page, problems, res };
}

async function signIn(page, token) {
  await page.$eval('#token', (e) => { e.value = ''; });
  await page.type('#token', token);
  await page.click('#signin button[type=submit]');
  await page.waitForFunction(() => !document.querySelector('#app').hidden && document.querySelector('#live').textContent === 'live');
}

// press clicks a button of the list inside the page, in one step: the list
// is drawn anew on every event, so a handle found first may be gone by the
// click.
const press = (page, sel) => page.waitForFunction((s) => {
  const b = document.querySelector(s);
  if (!b || b.disabled) return false;
  b.click();
  return true;
}, {}, sel);
const shot = (page, name) => page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
const row = (id) => `tr[data-id="${id}"]`;
const rowText = (page, id) => page.$eval(row(id), (tr) => tr.textContent);
const waitRow = (page, id, re, timeout = 60_000) => page.waitForFunction(
  (sel, src) => new RegExp(src).test(document.querySelector(sel)?.textContent || ''), { timeout }, row(id), re.source);
const waitText = (page, sel, re, timeout = 60_000) => page.waitForFunction(
  (s, src) => new RegExp(src).test(document.querySelector(s)?.textContent || ''), { timeout }, sel, re.source);

test('dashboard: the operator console, end to end', { timeout: 600_000 }, async () => {
  // A sandbox made before sign-in, serving a page on an exposed port.
  const first = await api('POST', '/v1/sandboxes', { name: 'ui-first', labels: { via: 'api', team: 'ui' } });
  assert.equal(first.status, 201, JSON.stringify(first.body));
  const started = await api('POST', `/v1/sandboxes/${first.body.id}/exec`, {
    cmd: 'sh', args: ['-c', 'mkdir -p /tmp/w && echo hi > /tmp/w/index.html && httpd -p 8080 -h /tmp/w'],
  });
  assert.equal(started.status, 200, JSON.stringify(started.body));
  const exposed = await api('POST', `/v1/sandboxes/${first.body.id}/ports`, { port: 8080 });
  assert.equal(exposed.status, 201, JSON.stringify(exposed.body));

  const { page, problems, res } = await newPage();
  assert.match(res.headers()['content-security-policy'] || '', /script-src 'self';/);

  // The sign-in page says the daemon is up (it used to say "offline").
  await waitText(page, '#daemon-status', /is up/);
  assert.equal(await page.$eval('#live', (e) => e.hidden), true);
  await shot(page, '01-signin');

  // A wrong token is refused on the page.
  await page.type('#token', 'not-the-token');
  await page.click('#signin button[type=submit]');
  await waitText(page, '#signin-error', /refused/);
  assert.equal(await page.$eval('#app', (e) => e.hidden), true);
  problems.length = 0; // the browser logs the refused request's 401

  // The admin token signs in and lists the first sandbox with its labels
  // and its port as a link; the admin panels show.
  await signIn(page, daemon.token);
  await page.waitForSelector(row(first.body.id));
  const firstRow = await page.$eval(row(first.body.id), (tr) => ({ text: tr.textContent, link: tr.querySelector('a')?.href }));
  assert.match(firstRow.text, /ui-first/);
  assert.match(firstRow.text, /running/);
  assert.match(firstRow.text, /team=ui/);
  assert.equal(firstRow.link, `${exposed.body.public_url}/`);
  assert.match(await page.$eval('#who', (e) => e.textContent), /admin/);
  assert.equal(await page.$eval('#admin', (e) => e.hidden), false);

  // A sandbox made through the API appears without a reload, and the
  // event feed says so.
  await page.evaluate(() => { window.__sameDocument = true; });
  const second = await api('POST', '/v1/sandboxes', { name: 'ui-second', labels: { via: 'api' } });
  assert.equal(second.status, 201);
  await waitRow(page, second.body.id, /running/);
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page reloaded');
  await page.waitForFunction((id) => [...document.querySelectorAll('#feed li')].some((li) => li.textContent.includes(id)), {}, second.body.id);

  // The exec box runs a command in the chosen sandbox.
  await page.select('#exec-target', second.body.id);
  await page.type('#exec-cmd', 'echo hello-from-the-page; echo to-stderr >&2');
  await page.click('#exec button[type=submit]');
  await waitText(page, '#terminal', /hello-from-the-page/);
  assert.match(await page.$eval('#terminal', (e) => e.textContent), /to-stderr/);

  // The figures come from /metrics with a label on every number: two
  // cold creates so far (refreshed every 5 s).
  await page.waitForFunction(() => Number(document.querySelector('#fig-creates-cold').textContent) >= 2, { timeout: 30_000 });
  const figures = await page.$eval('#figures', (e) => e.textContent);
  assert.match(figures, /cold start/);
  assert.match(figures, /from the warm pool/);
  assert.doesNotMatch(figures, /\d+ \/ \d+ \/ \d+/, 'the figures are still slash-separated');
  assert.match(await page.$eval('#fig-idem-acquired', (e) => e.textContent), /^\d+$/);
  await shot(page, '02-list');

  // The create form refuses bad input itself, without a request.
  const before = (await api('GET', '/v1/sandboxes')).body.sandboxes.length;
  await page.type('#create-env', 'not an assignment');
  await page.click('#create button[type=submit]');
  await waitText(page, '#create-status', /environment line 1/);
  await page.$eval('#create-env', (e) => { e.value = ''; });
  await page.type('#create-memory', '-5');
  await page.click('#create button[type=submit]');
  await waitText(page, '#create-status', /Memory must be/);
  await page.$eval('#create-memory', (e) => { e.value = ''; });
  // The daemon's refusal is shown with its message.
  await page.type('#create-image', 'sandpit/no-such-image:never');
  await page.click('#create button[type=submit]');
  await waitText(page, '#create-status', /failed: .*image/i);
  await shot(page, '03-create-refused');
  assert.equal((await api('GET', '/v1/sandboxes')).body.sandboxes.length, before, 'a refused create made a sandbox');
  problems.length = 0; // the browser logs the refused request's 400
  await page.$eval('#create-image', (e) => { e.value = ''; });

  // Create through the page with env, labels and limits; the API sees
  // them, and the engine applied the memory limit.
  await page.type('#create-name', 'ui-third');
  await page.type('#create-labels', 'made=page, k=v');
  await page.type('#create-env', 'GREETING=hello-from-ui\nOTHER=a b=c');
  await page.type('#create-cpu', '0.5');
  await page.type('#create-memory', '256');
  await page.type('#create-timeout', '3600');
  await page.click('#create button[type=submit]');
  await waitText(page, '#create-status', /created sb\w+ in/);
  const third = (await page.$eval('#create-status', (e) => e.textContent)).match(/created (sb\w+)/)[1];
  const seen = await api('GET', `/v1/sandboxes/${third}`);
  assert.equal(seen.status, 200);
  assert.deepEqual(seen.body.labels, { made: 'page', k: 'v' });
  assert.deepEqual(seen.body.env, { GREETING: 'hello-from-ui', OTHER: 'a b=c' });
  assert.equal(seen.body.cpu, 0.5);
  assert.equal(seen.body.memory_mb, 256);
  assert.ok(seen.body.end_at, 'the timeout set no end');
  const stats = await api('GET', `/v1/sandboxes/${third}/stats`);
  assert.equal(stats.status, 200, JSON.stringify(stats.body));
  assert.equal(stats.body.memory_limit_bytes, 256 * 1024 * 1024);
  await waitRow(page, third, /0\.5 CPUs · 256 MiB/);

  // Its panel opens on the terminal: type a command through the page and
  // read its output back from xterm's rows.
  await press(page, `${row(third)} button[data-action=open]`);
  await waitText(page, '#term-status', new RegExp(`connected to ${third}`));
  await page.waitForSelector('#xterm .xterm-rows');
  await page.click('#xterm');
  await page.keyboard.type('echo $GREETING');
  await page.keyboard.press('Enter');
  await waitText(page, '#xterm .xterm-rows', /hello-from-ui/, 30_000);
  // The buffer holds the answer on a line of its own, after the command.
  const buffer = await page.evaluate(() => window.sandpitDashboard.terminalText());
  assert.ok(buffer.split('\n').some((l) => l.trim() === 'hello-from-ui'), buffer);
  await shot(page, '04-terminal');

  // Stats with units and the limit.
  await page.click('#tabs button[data-tab=stats]');
  await waitText(page, '#stats', /of 256 MiB/);
  assert.match(await page.$eval('#stats', (e) => e.textContent), /CPU[\d.]+ % of/);
  await shot(page, '05-stats');

  // Logs: this sandbox has no start command, and the page says so.
  await page.click('#tabs button[data-tab=logs]');
  await waitText(page, '#logs', /no start command|start command has written nothing/);
  problems.length = 0; // the missing log file's 404

  // Files: list a directory, upload into it, and the API reads it back.
  await page.click('#tabs button[data-tab=files]');
  await waitText(page, '#files-status', /entries in \/tmp/);
  const local = join(tmpdir(), `ui-upload-${process.pid}.txt`);
  writeFileSync(local, 'uploaded through the page\n');
  const input = await page.$('#files-upload-input');
  await input.uploadFile(local);
  await page.click('#files-upload button[type=submit]');
  await waitText(page, '#files-status', /entries in \/tmp/);
  await page.waitForSelector(`#files tr[data-path="/tmp/ui-upload-${process.pid}.txt"]`);
  const read = await fetch(`${daemon.base}/v1/sandboxes/${third}/files?path=/tmp/ui-upload-${process.pid}.txt`, { headers: { Authorization: `Bearer ${daemon.token}` } });
  assert.equal(await read.text(), 'uploaded through the page\n');
  // Download it back through the page's button, into a directory the
  // browser is told to save downloads in.
  const downloads = join(tmpdir(), `ui-downloads-${process.pid}`);
  mkdirSync(downloads, { recursive: true });
  const cdp = await page.createCDPSession();
  await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads });
  await page.click(`#files tr[data-path="/tmp/ui-upload-${process.pid}.txt"] button`);
  await waitText(page, '#files-status', /downloaded/);
  const saved = join(downloads, `ui-upload-${process.pid}.txt`);
  while (!existsSync(saved) || readFileSync(saved, 'utf8') !== 'uploaded through the page\n') {
    await new Promise((r) => setTimeout(r, 100)); // until the browser has written it
  }
  rmSync(downloads, { recursive: true, force: true });
  rmSync(local, { force: true });
  await shot(page, '06-files');

  // Ports: expose one and see its URL as a link, in the panel and the list.
  await page.click('#tabs button[data-tab=ports]');
  await page.type('#expose-port', '8080');
  await page.click('#expose button[type=submit]');
  await waitText(page, '#expose-status', /exposed at http/);
  const ports = await api('GET', `/v1/sandboxes/${third}/ports`);
  assert.equal(ports.body.ports.length, 1);
  const url = ports.body.ports[0].public_url;
  await page.waitForFunction((u) => [...document.querySelectorAll('#ports a')].some((a) => a.href === `${u}/`), {}, url);
  await page.waitForFunction((sel, u) => [...document.querySelectorAll(`${sel} a`)].some((a) => a.href === `${u}/`), {}, row(third), url);
  await shot(page, '07-ports');

  // Stop, then start: the state shown follows, and the terminal closes
  // with the stop.
  await press(page, `${row(third)} button[data-action=stop]`);
  await waitRow(page, third, /stopped/);
  assert.equal((await api('GET', `/v1/sandboxes/${third}`)).body.state, 'stopped');
  await waitText(page, '#detail-state', /stopped/);
  await shot(page, '08-stopped');
  await press(page, `${row(third)} button[data-action=start]`);
  await waitRow(page, third, /running/);
  assert.equal((await api('GET', `/v1/sandboxes/${third}`)).body.state, 'running');
  await page.waitForFunction((id) => [...document.querySelectorAll('#feed li')].some((li) => li.textContent.includes(id) && /stopped/.test(li.textContent)), {}, third);
  // Pause and resume the same way.
  await press(page, `${row(third)} button[data-action=pause]`);
  await waitRow(page, third, /paused/);
  assert.equal((await api('GET', `/v1/sandboxes/${third}`)).body.state, 'paused');
  await press(page, `${row(third)} button[data-action=resume]`);
  await waitRow(page, third, /running/);
  assert.equal((await api('GET', `/v1/sandboxes/${third}`)).body.state, 'running');

  // Delete asks first: cancelled, the sandbox stays; confirmed, it goes.
  await press(page, `${row(second.body.id)} button[data-action=delete]`);
  await page.waitForSelector('#confirm[open]');
  assert.match(await page.$eval('#confirm-text', (e) => e.textContent), new RegExp(second.body.id));
  await shot(page, '09-confirm-delete');
  await page.click('#confirm-cancel');
  await page.waitForSelector('#confirm:not([open])');
  assert.equal((await api('GET', `/v1/sandboxes/${second.body.id}`)).status, 200, 'a cancelled delete deleted');
  assert.ok(await page.$(row(second.body.id)), 'a cancelled delete removed the row');
  await press(page, `${row(second.body.id)} button[data-action=delete]`);
  await page.waitForSelector('#confirm[open]');
  await page.click('#confirm-ok');
  await page.waitForFunction((sel) => !document.querySelector(sel), { timeout: 30_000 }, row(second.body.id));
  assert.equal((await api('GET', `/v1/sandboxes/${second.body.id}`)).status, 404);
  await shot(page, '10-deleted');
  assert.deepEqual(problems, []);

  // The personal-token view: alice's token sees alice's sandbox only, not
  // the admin's, and no admin panel.
  const tok = await api('POST', '/v1/tokens', { name: 'alice-ui', owner: 'alice' });
  assert.equal(tok.status, 201, JSON.stringify(tok.body));
  const mine = await api('POST', '/v1/sandboxes', { name: 'alice-box' }, tok.body.token);
  assert.equal(mine.status, 201, JSON.stringify(mine.body));
  const personal = await newPage();
  await signIn(personal.page, tok.body.token);
  await personal.page.waitForSelector(row(mine.body.id));
  for (const id of [first.body.id, third]) {
    assert.equal(await personal.page.$(row(id)), null, `alice's view lists the admin's ${id}`);
  }
  assert.match(await personal.page.$eval('#who', (e) => e.textContent), /personal token/);
  assert.equal(await personal.page.$eval('#admin', (e) => e.hidden), true);
  await waitText(personal.page, '#figures-note', /admin token/);
  // A sandbox of the admin's made now does not appear either, while
  // alice's own new one does.
  const later = await api('POST', '/v1/sandboxes', { name: 'admin-later' });
  const mine2 = await api('POST', '/v1/sandboxes', { name: 'alice-two' }, tok.body.token);
  await personal.page.waitForSelector(row(mine2.body.id), { timeout: 30_000 });
  assert.equal(await personal.page.$(row(later.body.id)), null, "alice's view lists the admin's new sandbox");
  await shot(personal.page, '11-personal-token');
  await waitText(personal.page, '#fig-running', /^2$/);
  // The one refusal the page met is its check for the admin's token list.
  personal.problems.splice(0, personal.problems.length, ...personal.problems.filter((p) => !/status of 403/.test(p)));
  assert.deepEqual(personal.problems, []);

  // The admin's page lists alice's token and owner.
  // A tab in the background gets no animation frames, which the page's
  // waits poll on: the admin's comes to the front again.
  await page.bringToFront();
  await page.reload({ waitUntil: 'domcontentloaded' });
  await page.waitForSelector('#tokens tr[data-token="alice-ui"]');
  await page.waitForSelector('#owners tr[data-owner="alice"]');
  assert.match(await page.$eval('#owners tr[data-owner="alice"]', (e) => e.textContent), /^alice2/);
  // The admin makes a token through the page (its own page, Tokens): its
  // secret is shown once and works; revoking it (confirmed) refuses it
  // from then on.
  await page.click('#pages button[data-page="tokens"]');
  await page.type('#token-name', 'bob-ui');
  await page.type('#token-owner', 'bob');
  await page.select('#token-scope', 'sandboxes:read');
  await page.click('#token-create button[type=submit]');
  await waitText(page, '#token-secret', /shown once/);
  const bobSecret = await page.$eval('#token-secret code', (e) => e.textContent);
  assert.equal((await api('GET', '/v1/sandboxes', undefined, bobSecret)).status, 200);
  await page.waitForSelector('#tokens tr[data-token="bob-ui"]');
  assert.match(await page.$eval('#tokens tr[data-token="bob-ui"]', (e) => e.textContent), /bobsandboxes:read/);
  await shot(page, '12-admin');
  await press(page, '#tokens tr[data-token="bob-ui"] button');
  await page.waitForSelector('#confirm[open]');
  await page.click('#confirm-ok');
  await waitText(page, '#tokens tr[data-token="bob-ui"]', /revoked/);
  assert.equal((await api('GET', '/v1/sandboxes', undefined, bobSecret)).status, 401);

  for (const id of [first.body.id, third, later.body.id, mine.body.id, mine2.body.id]) {
    assert.equal((await api('DELETE', `/v1/sandboxes/${id}`)).status, 204);
  }
  await page.waitForFunction((sel) => !document.querySelector(sel), { timeout: 30_000 }, row(first.body.id));
  await personal.page.close();
  await page.close();
});

test('dashboard: templates with their state and newest build, live', { timeout: 180_000 }, async () => {
  const { page, problems } = await newPage();
  await signIn(page, daemon.token);
  assert.equal(await page.$eval('#tpl-empty', (e) => e.hidden), false);

  // Builds started through the API show up without a reload, and end as
  // ready or error (with the engine's reason) through the event stream.
  const good = await api('POST', '/v1/templates', { name: 'ui-good', dockerfile: 'FROM sandpit/base:test\nRUN echo ok > /ok\n' });
  assert.equal(good.status, 202, JSON.stringify(good.body));
  const bad = await api('POST', '/v1/templates', { name: 'ui-bad', dockerfile: 'FROM sandpit/base:test\nRUN exit 5\n' });
  assert.equal(bad.status, 202, JSON.stringify(bad.body));
  const tpl = (name) => `tr[data-template="${name}"]`;
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.includes('ready'), { timeout: 120_000 }, tpl('ui-good'));
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.includes('error'), { timeout: 120_000 }, tpl('ui-bad'));
  const goodText = await page.$eval(tpl('ui-good'), (tr) => tr.textContent);
  assert.match(goodText, new RegExp(good.body.build.id));
  assert.match(await page.$eval(tpl('ui-bad'), (tr) => tr.textContent), /5/);
  // A ready template is offered in the create form.
  await page.waitForSelector('#template-names option[value="ui-good"]');
  await shot(page, '13-templates');

  for (const name of ['ui-good', 'ui-bad']) {
    assert.equal((await api('DELETE', `/v1/templates/${name}`)).status, 204);
  }
  assert.deepEqual(problems, []);
  await page.close();
});

test('dashboard: pages, list columns, and Run a command in the open sandbox', { timeout: 240_000 }, async () => {
  // Two running sandboxes that say which they are; the older is the list's
  // first row, so a command aimed at the first row would be caught.
  const made = [];
  for (const who of ['older', 'newer']) {
    const sb = await api('POST', '/v1/sandboxes', { name: `pages-${who}`, timeout_s: 3600 });
    assert.equal(sb.status, 201, JSON.stringify(sb.body));
    const w = await api('POST', `/v1/sandboxes/${sb.body.id}/exec`, { cmd: 'sh', args: ['-c', `echo I-am-${who} > /tmp/who`] });
    assert.equal(w.status, 200, JSON.stringify(w.body));
    made.push(sb.body.id);
  }
  const [older, newer] = made;
  const snap = await api('POST', `/v1/sandboxes/${older}/snapshots`, { name: 'pages-snap' });
  assert.ok(snap.status < 300, JSON.stringify(snap.body));
  const vol = await api('POST', '/v1/volumes', { name: 'pages-vol' });
  assert.ok(vol.status < 300, JSON.stringify(vol.body));

  const { page, problems } = await newPage();
  await signIn(page, daemon.token);
  await page.waitForSelector(row(newer));

  // The list names what each sandbox came from, its age and its deadline.
  const headers = await page.$$eval('#sandboxes thead th', (ths) => ths.map((th) => th.textContent));
  for (const h of ['Template', 'Age', 'Deadline']) assert.ok(headers.includes(h), headers.join(','));
  const cells = await page.$eval(row(newer), (tr) => ({
    template: tr.querySelector('td.template').textContent, age: tr.querySelector('td.age').textContent, deadline: tr.querySelector('td.deadline').textContent,
  }));
  assert.equal(cells.template, 'sandpit/base:test'); // made from no template: the image
  assert.match(cells.age, /^\d+[smhd]$/);
  assert.match(cells.deadline, /^in (59|60)m /);

  // The warm-pool tile names the flag that exists.
  await waitText(page, '#fig-pool', /--warm-pool/);

  // Run a command runs in the open sandbox, not the first row's.
  await press(page, `${row(newer)} button[data-action="open"]`);
  await page.waitForFunction((id) => document.querySelector('#detail-id')?.textContent === id, {}, newer);
  await page.type('#exec-cmd', 'cat /tmp/who');
  await page.click('#exec button[type=submit]');
  // The command's output, or its error, lands in the terminal; on a
  // timeout say what the page showed and aimed at.
  await page.waitForFunction(() => /I-am-|error/.test(document.querySelector('#terminal')?.textContent || ''), { timeout: 60_000 })
    .catch(async (err) => {
      const seen = await page.$eval('#terminal', (e) => e.textContent);
      const target = await page.$eval('#exec-target', (e) => e.value);
      throw new Error(`${err.message}: terminal ${JSON.stringify(seen)}, exec target ${target}`);
    });
  assert.match(await page.$eval('#terminal', (e) => e.textContent), /I-am-newer/);
  assert.doesNotMatch(await page.$eval('#terminal', (e) => e.textContent), /I-am-older/);

  // Pages: each shows its own sections only.
  const visible = (sel) => page.$eval(sel, (e) => e.offsetParent !== null);
  assert.equal(await visible('#sandboxes'), true);
  for (const [name, table, key] of [['templates', '#templates', null], ['snapshots', '#snapshots', 'pages-snap'], ['volumes', '#volumes', 'pages-vol'], ['tokens', '#tokens', null]]) {
    await page.click(`#pages button[data-page="${name}"]`);
    await page.waitForFunction((sel) => document.querySelector(sel)?.offsetParent !== null, {}, table);
    assert.equal(await visible('#sandboxes'), false, `the sandbox list shows on the ${name} page`);
    if (key) await waitText(page, table, new RegExp(key));
    await shot(page, `14-page-${name}`);
  }
  // A reload stays on the page it was on.
  await page.reload({ waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => !document.querySelector('#app').hidden);
  await page.waitForFunction(() => document.querySelector('#tokens')?.offsetParent !== null);

  for (const id of made) assert.equal((await api('DELETE', `/v1/sandboxes/${id}`)).status, 204);
  assert.ok((await api('DELETE', '/v1/snapshots/pages-snap')).status < 300);
  assert.ok((await api('DELETE', '/v1/volumes/pages-vol')).status < 300);
  assert.deepEqual(problems, []);
  await page.close();
});

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

test('dashboard: cluster members and the node of each sandbox', { timeout: 300_000 }, async () => {
  const key = join(tmpdir(), `ui-cluster-${process.pid}.key`);
  writeFileSync(key, "the ui test cluster's shared secret\n", { mode: 0o600 });
  process.env.SANDPIT_TEST_CLUSTER_FAST = '1';
  const node = await startDaemon(['--cluster', '--node-name', 'solo', '--bootstrap', '--cluster-key-file', key,
    '--gossip-listen', `127.0.0.1:${await freePort()}`, '--raft-listen', `127.0.0.1:${await freePort()}`]);
  try {
    // The one-node cluster elects itself; until then creates wait for a
    // leader, so the test waits for one (a condition, not a time).
    let sb;
    for (;;) {
      sb = await api('POST', '/v1/sandboxes', { name: 'ui-clustered' }, node.token, node.base);
      if (sb.status === 201) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const { page, problems } = await newPage(node.base);
    await signIn(page, node.token);
    await page.waitForSelector('#members tr[data-member="solo"]');
    assert.equal(await page.$eval('#cluster', (e) => e.hidden), false);
    const member = await page.$eval('#members tr[data-member="solo"]', (e) => e.textContent);
    assert.match(member, /this node/);
    assert.match(member, /leader/);
    await waitRow(page, sb.body.id, /solo/);
    await shot(page, '14-cluster');
    assert.deepEqual(problems, []);
    await page.close();
    assert.equal((await api('DELETE', `/v1/sandboxes/${sb.body.id}`, undefined, node.token, node.base)).status, 204);
  } finally {
    await node.stop();
  }
});
