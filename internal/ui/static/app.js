// The Sandpit dashboard: plain JavaScript over the /v1 API. The token lives
// in this tab's session storage only. Everything a sandbox or a user
// controls (names, labels, command output) is put in the page as text, never
// as HTML.
'use strict';

const $ = (sel) => document.querySelector(sel);
const TOKEN_KEY = 'sandpit.token';

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  sandboxes: new Map(), // id -> {sb, ports, domains}
  templates: [], // as GET /v1/templates lists them
  events: null, // AbortController of the event stream
  figuresTimer: 0,
};

class APIError extends Error {
  constructor(status, code, message) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

// api calls the native API with the token; JSON in, JSON out.
async function api(method, path, body, extraHeaders = {}) {
  const headers = { Authorization: `Bearer ${state.token}`, ...extraHeaders };
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (!res.ok) {
    if (res.status === 401) signOut('The token was refused.');
    throw new APIError(res.status, data?.error?.code, data?.error?.message || text);
  }
  return data;
}

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// --- sign in -------------------------------------------------------------

async function signIn(token) {
  state.token = token;
  try {
    await api('GET', '/v1/sandboxes?limit=1');
  } catch (err) {
    state.token = '';
    throw err;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  showApp();
}

function signOut(message = '') {
  state.token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  state.events?.abort();
  clearInterval(state.figuresTimer);
  $('#app').hidden = true;
  $('#signout').hidden = true;
  $('#signin-view').hidden = false;
  $('#signin-error').textContent = message;
}

async function showApp() {
  $('#signin-view').hidden = true;
  $('#app').hidden = false;
  $('#signout').hidden = false;
  await refreshAll();
  followEvents();
  refreshFigures();
  state.figuresTimer = setInterval(refreshFigures, 5000);
}

// --- sandboxes -------------------------------------------------------------

async function refreshAll() {
  const all = [];
  let token = '';
  do {
    const q = new URLSearchParams({ limit: '500' });
    if (token) q.set('page_token', token);
    const page = await api('GET', `/v1/sandboxes?${q}`);
    all.push(...page.sandboxes);
    token = page.next_page_token || '';
  } while (token);
  state.sandboxes.clear();
  await Promise.all(all.map((sb) => loadDetails(sb)));
  render();
  await refreshTemplates();
}

// --- templates -----------------------------------------------------------------

// refreshTemplates lists the templates with their newest build; a daemon
// without template builds answers an error, and the section stays empty.
async function refreshTemplates() {
  try {
    state.templates = (await api('GET', '/v1/templates')).templates || [];
  } catch {
    state.templates = [];
  }
  renderTemplates();
}

function renderTemplates() {
  const rows = [...state.templates].sort((a, b) => (a.name || a.id).localeCompare(b.name || b.id));
  $('#templates tbody').replaceChildren(...rows.map((t) => {
    const b = t.build || {};
    const st = b.state || '-';
    return el('tr', { dataset: { template: t.name || t.id } },
      el('td', {}, t.name || el('code', {}, t.id)),
      el('td', {}, el('span', { class: `state ${st}` }, st)),
      el('td', {}, b.id ? el('code', {}, b.id) : '', b.created_at ? ` ${b.created_at.replace('T', ' ').slice(0, 19)}` : ''),
      el('td', {}, t.image ? el('code', {}, t.image) : ''),
      el('td', { class: 'error' }, b.error || ''));
  }));
  $('#tpl-empty').hidden = rows.length > 0;
  $('#tpl-count').textContent = rows.length ? `(${rows.length})` : '';
}

// loadDetails fetches a sandbox's ports and custom domains.
async function loadDetails(sb) {
  const entry = { sb, ports: [], domains: [] };
  state.sandboxes.set(sb.id, entry);
  if (sb.state !== 'running') return entry;
  try {
    const [ports, domains] = await Promise.all([
      api('GET', `/v1/sandboxes/${encodeURIComponent(sb.id)}/ports`),
      api('GET', `/v1/sandboxes/${encodeURIComponent(sb.id)}/custom-domains`),
    ]);
    entry.ports = ports.ports;
    entry.domains = domains.custom_domains;
  } catch {
    // Gone meanwhile: the event stream will say so.
  }
  return entry;
}

async function refreshOne(id) {
  try {
    const sb = await api('GET', `/v1/sandboxes/${encodeURIComponent(id)}`);
    await loadDetails(sb);
  } catch (err) {
    if (err.status === 404) state.sandboxes.delete(id);
  }
  render();
}

function linkFor(url) {
  // Only http(s) URLs become links; tcp:// addresses are shown as text.
  if (/^https?:\/\//.test(url)) return el('a', { href: url, target: '_blank', rel: 'noopener noreferrer' }, url);
  return el('code', {}, url);
}

function render() {
  const tbody = $('#sandboxes tbody');
  const rows = [...state.sandboxes.values()].sort((a, b) => a.sb.created_at.localeCompare(b.sb.created_at));
  tbody.replaceChildren(...rows.map(({ sb, ports, domains }) => el('tr', { dataset: { id: sb.id } },
    el('td', {}, el('code', {}, sb.id)),
    el('td', {}, sb.name || ''),
    el('td', {}, el('span', { class: `state ${sb.state}` }, sb.state)),
    el('td', {}, ...Object.entries(sb.labels || {}).map(([k, v]) => el('span', { class: 'label' }, `${k}=${v}`))),
    el('td', {}, 'this node'),
    el('td', {}, ...ports.map((p) => el('div', {}, `${p.port}/${p.protocol} `, linkFor(p.public_url)))),
    el('td', {}, ...domains.map((d) => el('div', {}, linkFor(d.url)))),
    el('td', {}, el('button', { class: 'danger', 'aria-label': `delete ${sb.id}`, onclick: () => remove(sb.id) }, 'Delete')),
  )));
  $('#empty').hidden = rows.length > 0;
  $('#count').textContent = rows.length ? `(${rows.length})` : '';
  const target = $('#exec-target');
  const chosen = target.value;
  target.replaceChildren(...rows.filter((r) => r.sb.state === 'running')
    .map(({ sb }) => el('option', { value: sb.id }, sb.name ? `${sb.name} (${sb.id})` : sb.id)));
  if ([...target.options].some((o) => o.value === chosen)) target.value = chosen;
}

async function remove(id) {
  const row = document.querySelector(`tr[data-id="${CSS.escape(id)}"] button`);
  if (row) row.disabled = true;
  try {
    await api('DELETE', `/v1/sandboxes/${encodeURIComponent(id)}`, undefined, { 'Idempotency-Key': crypto.randomUUID() });
    state.sandboxes.delete(id);
    render();
  } catch (err) {
    if (row) row.disabled = false;
    alert(`Delete failed: ${err.message}`);
  }
}

function parseLabels(s) {
  const out = {};
  for (const part of s.split(',').map((p) => p.trim()).filter(Boolean)) {
    const i = part.indexOf('=');
    if (i < 1) throw new Error(`label "${part}" is not key=value`);
    out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

async function create(ev) {
  ev.preventDefault();
  const status = $('#create-status');
  const body = {};
  try {
    const name = $('#create-name').value.trim();
    const image = $('#create-image').value.trim();
    const labels = parseLabels($('#create-labels').value);
    if (name) body.name = name;
    if (image) body.image = image;
    if (Object.keys(labels).length) body.labels = labels;
  } catch (err) {
    status.textContent = err.message;
    return;
  }
  status.textContent = 'creating…';
  const started = performance.now();
  try {
    // One key per click: a retried click after a lost answer would be a
    // new create anyway, but the browser's own retry is not.
    const sb = await api('POST', '/v1/sandboxes', body, { 'Idempotency-Key': crypto.randomUUID() });
    status.textContent = `created ${sb.id} in ${((performance.now() - started) / 1000).toFixed(1)}s`;
    await loadDetails(sb);
    render();
    $('#create').reset();
  } catch (err) {
    status.textContent = `failed: ${err.message}`;
  }
}

// --- exec ------------------------------------------------------------------

async function runExec(ev) {
  ev.preventDefault();
  const id = $('#exec-target').value;
  const cmd = $('#exec-cmd').value;
  if (!id || !cmd.trim()) return;
  const term = $('#terminal');
  term.append(el('span', { class: 'cmd' }, `${id}$ ${cmd}\n`));
  try {
    const res = await api('POST', `/v1/sandboxes/${encodeURIComponent(id)}/exec`, { cmd: 'sh', args: ['-c', cmd], timeout_s: 60 });
    if (res.stdout) term.append(res.stdout);
    if (res.stderr) term.append(el('span', { class: 'err' }, res.stderr));
    if (res.exit_code !== 0) term.append(el('span', { class: 'err' }, `[exit ${res.exit_code}]\n`));
  } catch (err) {
    term.append(el('span', { class: 'err' }, `error: ${err.message}\n`));
  }
  term.scrollTop = term.scrollHeight;
  $('#exec-cmd').value = '';
}

// --- live updates ------------------------------------------------------------

// followEvents reads GET /v1/events with fetch (EventSource cannot send an
// Authorization header) and reconnects after a pause, re-listing to catch up
// with what it missed.
async function followEvents() {
  state.events?.abort();
  const ctl = new AbortController();
  state.events = ctl;
  const live = $('#live');
  while (!ctl.signal.aborted) {
    try {
      const res = await fetch('/v1/events', { headers: { Authorization: `Bearer ${state.token}` }, signal: ctl.signal });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      live.textContent = 'live';
      live.className = 'badge on';
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
          if (data) onEvent(JSON.parse(data));
        }
      }
    } catch (err) {
      if (ctl.signal.aborted) return;
    }
    live.textContent = 'reconnecting';
    live.className = 'badge off';
    await new Promise((r) => setTimeout(r, 1000));
    if (!ctl.signal.aborted) await refreshAll().catch(() => {});
  }
}

function onEvent(ev) {
  if (ev.type && ev.type.startsWith('template.')) {
    refreshTemplates();
    return;
  }
  if (ev.type === 'deleted' || ev.type === 'expired') {
    state.sandboxes.delete(ev.sandbox_id);
    render();
    return;
  }
  refreshOne(ev.sandbox_id);
}

// --- figures from /metrics ---------------------------------------------------

// parseMetrics reads the Prometheus text format into name -> [{labels, value}].
function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const lm of (m[3] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]] = lm[2];
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value: Number(m[4]) });
  }
  return out;
}

function sum(metrics, name, match = {}) {
  return (metrics.get(name) || [])
    .filter((s) => Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);
}

async function refreshFigures() {
  const note = $('#figures-note');
  try {
    const res = await fetch('/metrics', { headers: { Authorization: `Bearer ${state.token}` } });
    if (res.status === 401 || res.status === 403) {
      note.textContent = 'Figures need the admin token.';
      return;
    }
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const m = parseMetrics(await res.text());
    $('#fig-running').textContent = sum(m, 'sandpit_sandboxes', { state: 'running' });
    $('#fig-creates').textContent = ['cold', 'warm', 'replayed', 'deduplicated']
      .map((path) => sum(m, 'sandpit_creates_total', { path })).join(' / ');
    $('#fig-idem').textContent = ['acquired', 'replay', 'in_flight', 'mismatch']
      .map((outcome) => sum(m, 'sandpit_idempotency_outcomes_total', { outcome })).join(' / ');
    $('#fig-pool').textContent = m.has('sandpit_pool_ready') ? sum(m, 'sandpit_pool_ready') : 'no pool';
    note.textContent = '';
  } catch (err) {
    note.textContent = `Figures unavailable: ${err.message}`;
  }
}

// --- wiring --------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  $('#signin').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    $('#signin-error').textContent = '';
    try {
      await signIn($('#token').value.trim());
      $('#token').value = '';
    } catch (err) {
      $('#token').select();
      $('#signin-error').textContent = err.status === 401 ? 'That token was refused.' : `Sign-in failed: ${err.message}`;
    }
  });
  $('#signout').addEventListener('click', () => signOut());
  $('#create').addEventListener('submit', create);
  $('#exec').addEventListener('submit', runExec);
  if (state.token) {
    signIn(state.token).catch(() => signOut('Please sign in again.'));
  }
});
