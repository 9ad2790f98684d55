// Drives the /ui dashboard in Debian's headless Chromium against a real
// daemon: sign in with the token, see a sandbox made through the API appear
// without a reload, run a command in the exec box, read the figures, delete
// the sandbox through the page and have the API confirm it is gone. A
// screenshot is kept as an artefact (SANDPIT_ARTIFACTS, default
// test/ui/artifacts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
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

async function api(method, path, body) {
  const res = await fetch(daemon.base + path, {
    method,
    headers: { Authorization: `Bearer ${daemon.token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

test('dashboard: sign in, live list, exec, figures, delete', { timeout: 180_000 }, async () => {
  // A sandbox made before sign-in, serving a page on an exposed port.
  const first = await api('POST', '/v1/sandboxes', { name: 'ui-first', labels: { via: 'api', team: 'ui' } });
  assert.equal(first.status, 201, JSON.stringify(first.body));
  const started = await api('POST', `/v1/sandboxes/${first.body.id}/exec`, {
    cmd: 'sh', args: ['-c', 'mkdir -p /tmp/w && echo hi > /tmp/w/index.html && httpd -p 8080 -h /tmp/w'],
  });
  assert.equal(started.status, 200, JSON.stringify(started.body));
  const exposed = await api('POST', `/v1/sandboxes/${first.body.id}/ports`, { port: 8080 });
  assert.equal(exposed.status, 201, JSON.stringify(exposed.body));

  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const problems = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    if (process.env.SANDPIT_LOG) process.stderr.write(`browser ${msg.type()}: ${msg.text()}\n`);
    if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
  });

  const res = await page.goto(`${daemon.base}/ui`, { waitUntil: 'networkidle0' });
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-security-policy'] || '', /script-src 'self'/);

  // A wrong token is refused on the page.
  await page.type('#token', 'not-the-token');
  await page.click('#signin button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#signin-error').textContent.includes('refused'));
  assert.equal(await page.$eval('#app', (e) => e.hidden), true);
  problems.length = 0; // the browser logs the refused request's 401

  // The right one signs in and lists the first sandbox with its labels
  // and its port as a link.
  await page.$eval('#token', (e) => { e.value = ''; });
  await page.type('#token', daemon.token);
  await page.click('#signin button[type=submit]');
  await page.waitForSelector(`tr[data-id="${first.body.id}"]`);
  const firstRow = await page.$eval(`tr[data-id="${first.body.id}"]`, (tr) => ({
    text: tr.textContent,
    link: tr.querySelector('a')?.href,
  }));
  assert.match(firstRow.text, /ui-first/);
  assert.match(firstRow.text, /running/);
  assert.match(firstRow.text, /team=ui/);
  assert.equal(firstRow.link, `${exposed.body.public_url}/`);
  await page.waitForFunction(() => document.querySelector('#live').textContent === 'live');

  // A sandbox made through the API appears without a reload.
  await page.evaluate(() => { window.__sameDocument = true; });
  const second = await api('POST', '/v1/sandboxes', { name: 'ui-second', labels: { via: 'api' } });
  assert.equal(second.status, 201);
  await page.waitForSelector(`tr[data-id="${second.body.id}"]`, { timeout: 15_000 });
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page reloaded');
  await page.waitForFunction((id) => document.querySelector(`tr[data-id="${id}"]`)?.textContent.includes('running'), {}, second.body.id);

  // The exec box runs a command in the chosen sandbox.
  await page.select('#exec-target', second.body.id);
  await page.type('#exec-cmd', 'echo hello-from-the-page; echo to-stderr >&2');
  await page.click('#exec button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#terminal').textContent.includes('hello-from-the-page'));
  assert.match(await page.$eval('#terminal', (e) => e.textContent), /to-stderr/);

  // The figures come from /metrics: two cold creates so far.
  // (refreshed every 5 s).
  await page.waitForFunction(() => {
    const m = document.querySelector('#fig-creates').textContent.match(/^(\d+) \/ \d+ \/ \d+ \/ \d+$/);
    return m && Number(m[1]) >= 2;
  }, { timeout: 15_000 });
  assert.match(await page.$eval('#fig-idem', (e) => e.textContent), /^\d+ \/ \d+ \/ \d+ \/ \d+$/);

  // Create through the page, with labels; the API sees it.
  await page.type('#create-name', 'ui-third');
  await page.type('#create-labels', 'made=page, k=v');
  await page.click('#create button[type=submit]');
  await page.waitForFunction(() => /created sb\w+ in/.test(document.querySelector('#create-status').textContent), { timeout: 60_000 });
  const third = (await page.$eval('#create-status', (e) => e.textContent)).match(/created (sb\w+)/)[1];
  const seen = await api('GET', `/v1/sandboxes/${third}`);
  assert.equal(seen.status, 200);
  assert.deepEqual(seen.body.labels, { made: 'page', k: 'v' });
  await page.waitForSelector(`tr[data-id="${third}"]`);

  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, 'dashboard.png'), fullPage: true });

  // Delete through the page; the API confirms.
  await page.click(`tr[data-id="${second.body.id}"] button.danger`);
  await page.waitForFunction((id) => !document.querySelector(`tr[data-id="${id}"]`), { timeout: 30_000 }, second.body.id);
  const gone = await api('GET', `/v1/sandboxes/${second.body.id}`);
  assert.equal(gone.status, 404);

  // Deletes through the API disappear from the page too.
  for (const id of [first.body.id, third]) {
    assert.equal((await api('DELETE', `/v1/sandboxes/${id}`)).status, 204);
    await page.waitForFunction((id) => !document.querySelector(`tr[data-id="${id}"]`), { timeout: 15_000 }, id);
  }
  await page.screenshot({ path: join(artifacts, 'dashboard-empty.png'), fullPage: true });

  assert.deepEqual(problems, []);
});

test('dashboard: templates with their state and newest build, live', { timeout: 180_000 }, async () => {
  const page = await browser.newPage();
  const problems = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console: ${msg.text()}`); });
  await page.goto(`${daemon.base}/ui`, { waitUntil: 'networkidle0' });
  await page.type('#token', daemon.token);
  await page.click('#signin button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#live').textContent === 'live');
  assert.equal(await page.$eval('#tpl-empty', (e) => e.hidden), false);

  // Builds started through the API show up without a reload, and end as
  // ready or error (with the engine's reason) through the event stream.
  const good = await api('POST', '/v1/templates', { name: 'ui-good', dockerfile: 'FROM sandpit/base:test\nRUN echo ok > /ok\n' });
  assert.equal(good.status, 202, JSON.stringify(good.body));
  const bad = await api('POST', '/v1/templates', { name: 'ui-bad', dockerfile: 'FROM sandpit/base:test\nRUN exit 5\n' });
  assert.equal(bad.status, 202, JSON.stringify(bad.body));
  const row = (name) => `tr[data-template="${name}"]`;
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.includes('ready'), { timeout: 120_000 }, row('ui-good'));
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.includes('error'), { timeout: 120_000 }, row('ui-bad'));
  const goodText = await page.$eval(row('ui-good'), (tr) => tr.textContent);
  assert.match(goodText, new RegExp(good.body.build.id));
  assert.match(await page.$eval(row('ui-bad'), (tr) => tr.textContent), /5/);
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, 'dashboard-templates.png'), fullPage: true });

  for (const name of ['ui-good', 'ui-bad']) {
    assert.equal((await api('DELETE', `/v1/templates/${name}`)).status, 204);
  }
  assert.deepEqual(problems, []);
});
