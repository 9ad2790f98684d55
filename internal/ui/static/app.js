// The Sandpit dashboard: plain JavaScript over the /v1 API, with xterm.js
// (vendored, see vendor/xterm/README.md) for the terminal. The token lives
// in this tab's session storage only. Everything a sandbox or a user
// controls (names, labels, command output, file names) is put in the page as
// text, never as HTML.
'use strict';

const $ = (sel) => document.querySelector(sel);
const TOKEN_KEY = 'sandpit.token';
const FEED_MAX = 100;
const START_LOG = '/tmp/.sandpit-start.log'; // agentapi.StartLogPath

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  admin: false,
  sandboxes: new Map(), // id -> {sb, ports, domains}
  templates: [], // as GET /v1/templates lists them
  events: null, // AbortController of the event stream
  timers: [],
  selected: '', // the sandbox whose panel is open
  execTarget: '', // the sandbox "Run a command" runs in: the open one, or the one chosen
  tab: 'terminal',
  term: null, // {xterm, fit, ws, id, observer}
};

class APIError extends Error {
  constructor(status, code, message) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

const enc = encodeURIComponent;
const sbPath = (id, rest = '') => `/v1/sandboxes/${enc(id)}${rest}`;
const idemKey = () => ({ 'Idempotency-Key': crypto.randomUUID() });

// request calls the daemon with the token and returns the raw response,
// throwing the daemon's error message on failure.
async function request(method, path, { body, headers = {}, raw } = {}) {
  const init = { method, headers: { Authorization: `Bearer ${state.token}`, ...headers } };
  if (raw !== undefined) {
    init.body = raw;
  } else if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (!res.ok) {
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
    if (res.status === 401 && state.token) signOut('The token was refused.');
    // The native error shape, or Connect's ({code, message}) through the
    // agent passthrough.
    throw new APIError(res.status, data?.error?.code || data?.code, data?.error?.message || data?.message || text);
  }
  return res;
}

// api is request for JSON in, JSON out.
async function api(method, path, body, headers = {}) {
  const res = await request(method, path, { body, headers });
  if (res.status === 204) return null;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// --- units -----------------------------------------------------------------

function bytes(n) {
  if (n === undefined || n === null || Number.isNaN(Number(n))) return '–';
  n = Number(n);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

const mib = (n) => bytes(n * 1024 * 1024);
const cores = (n) => `${Number(n.toFixed(2))} ${n === 1 ? 'CPU' : 'CPUs'}`;

function when(t) {
  if (!t) return '';
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? String(t) : d.toLocaleString();
}

// span is a duration in words a glance reads: 45s, 12m, 3h, 2d.
function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

const age = (sb) => span(Date.now() - new Date(sb.created_at).getTime());

// deadline is when the sandbox's timeout acts, or none.
function deadline(sb) {
  if (!sb.end_at) return 'none';
  const end = new Date(sb.end_at);
  const left = end.getTime() - Date.now();
  return left > 0 ? `in ${span(left)} (${end.toLocaleTimeString()})` : `passed (${end.toLocaleTimeString()})`;
}

function limitsOf(sb) {
  const parts = [];
  if (sb.cpu) parts.push(cores(sb.cpu));
  if (sb.memory_mb) parts.push(mib(sb.memory_mb));
  if (sb.end_at) parts.push(`until ${new Date(sb.end_at).toLocaleTimeString()}`);
  return parts.length ? parts.join(' · ') : 'defaults';
}

// --- sign in -------------------------------------------------------------

// checkDaemon says on the sign-in page whether the daemon answers, which
// needs no token.
async function checkDaemon() {
  const out = $('#daemon-status');
  try {
    const res = await fetch('/health');
    out.textContent = res.ok ? `The daemon at ${location.host} is up; sign in to see its sandboxes.` : `The daemon answered ${res.status} to /health.`;
    out.className = res.ok ? 'note ok' : 'error';
  } catch (err) {
    out.textContent = `The daemon at ${location.host} does not answer (${err.message}).`;
    out.className = 'error';
  }
}

async function signIn(token) {
  state.token = token;
  try {
    await api('GET', '/v1/sandboxes?limit=1');
  } catch (err) {
    state.token = '';
    throw err;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  await showApp();
}

function signOut(message = '') {
  state.token = '';
  state.admin = false;
  sessionStorage.removeItem(TOKEN_KEY);
  state.events?.abort();
  state.timers.forEach(clearInterval);
  state.timers = [];
  closeTerminal();
  closeDetail();
  $('#app').hidden = true;
  $('#signout').hidden = true;
  $('#live').hidden = true;
  $('#who').textContent = '';
  $('#signin-view').hidden = false;
  $('#signin-error').textContent = message;
  checkDaemon();
}

// whoAmI finds out whether the token is the admin's: only the admin may
// list tokens. A personal token sees its owner's sandboxes only, and the
// admin panels stay hidden.
async function whoAmI() {
  try {
    await api('GET', '/v1/tokens');
    state.admin = true;
  } catch (err) {
    if (err.status !== 403) throw err;
    state.admin = false;
  }
  $('#who').textContent = state.admin ? 'signed in as admin' : "signed in with a personal token: its owner's sandboxes only";
  $('#admin').hidden = !state.admin;
}

async function showApp() {
  $('#signin-view').hidden = true;
  $('#app').hidden = false;
  $('#signout').hidden = false;
  $('#live').hidden = false;
  await whoAmI();
  // Tokens and owners are the admin's page.
  document.querySelector('#pages button[data-page="tokens"]').hidden = !state.admin;
  showPage(location.hash.slice(1) || 'sandboxes');
  await refreshAll();
  followEvents();
  refreshFigures();
  state.timers.push(setInterval(refreshFigures, 5000));
  state.timers.push(setInterval(() => { if (state.selected && state.tab === 'stats') refreshStats(); }, 5000));
  if (state.admin) {
    refreshAdmin();
    refreshCluster();
    // Members come and go, and placements change, without an event.
    state.timers.push(setInterval(() => { if (!$('#cluster').hidden) refreshCluster(); }, 10_000));
  }
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
  await Promise.all([refreshSnapshots(), refreshVolumes()]);
}

// --- pages -------------------------------------------------------------------

// showPage shows the sections of one page (sandboxes, templates, snapshots,
// volumes, tokens) and remembers it in the address, so a reload stays.
function showPage(name) {
  const known = [...document.querySelectorAll('#pages button')].filter((b) => !b.hidden).map((b) => b.dataset.page);
  if (!known.includes(name)) name = 'sandboxes';
  for (const s of document.querySelectorAll('main > section[data-page]')) s.classList.toggle('off-page', s.dataset.page !== name);
  for (const b of document.querySelectorAll('#pages button')) {
    if (b.dataset.page === name) b.setAttribute('aria-current', 'page');
    else b.removeAttribute('aria-current');
  }
  if (location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
  if (name === 'snapshots') refreshSnapshots();
  if (name === 'volumes') refreshVolumes();
  if (name === 'templates') refreshTemplates();
}

async function refreshSnapshots() {
  let snaps = [];
  try {
    snaps = (await api('GET', '/v1/snapshots')).snapshots || [];
  } catch { /* a daemon without snapshots: the page says none */ }
  snaps.sort((a, b) => (b.created_at || '').localeCompare(a.created_at || ''));
  $('#snapshots tbody').replaceChildren(...snaps.map((t) => el('tr', { dataset: { snapshot: t.name || t.id } },
    el('td', {}, t.name || ''),
    el('td', {}, el('code', {}, t.id)),
    el('td', {}, t.source_sandbox ? el('code', {}, t.source_sandbox) : ''),
    el('td', {}, el('span', { class: `state ${t.build?.state || ''}` }, t.build?.state || '-')),
    el('td', {}, when(t.created_at)))));
  $('#snap-empty').hidden = snaps.length > 0;
  $('#snap-count').textContent = snaps.length ? `(${snaps.length})` : '';
}

async function refreshVolumes() {
  let vols = [];
  try {
    vols = (await api('GET', '/v1/volumes')).volumes || [];
  } catch { /* a daemon without volumes: the page says none */ }
  vols.sort((a, b) => a.name.localeCompare(b.name));
  $('#volumes tbody').replaceChildren(...vols.map((v) => el('tr', { dataset: { volume: v.name } },
    el('td', {}, v.name),
    el('td', {}, el('code', {}, v.id)),
    el('td', {}, el('span', { class: `state ${v.state}` }, v.state)),
    el('td', {}, when(v.created_at)))));
  $('#vol-empty').hidden = vols.length > 0;
  $('#vol-count').textContent = vols.length ? `(${vols.length})` : '';
}

// loadDetails fetches a sandbox's ports and custom domains.
async function loadDetails(sb) {
  const entry = { sb, ports: [], domains: [] };
  state.sandboxes.set(sb.id, entry);
  if (sb.state !== 'running') return entry;
  try {
    const [ports, domains] = await Promise.all([
      api('GET', sbPath(sb.id, '/ports')),
      api('GET', sbPath(sb.id, '/custom-domains')),
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
    const sb = await api('GET', sbPath(id));
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

// actionsFor are the buttons a sandbox in its state offers.
function actionsFor(sb) {
  const b = (label, cls, fn) => el('button', { class: cls, dataset: { action: label.toLowerCase() }, 'aria-label': `${label.toLowerCase()} ${sb.id}`, onclick: fn }, label);
  const out = [b('Open', 'plain', () => openDetail(sb.id))];
  if (sb.state === 'running') {
    out.push(b('Stop', 'plain', () => lifecycle(sb.id, 'stop')));
    out.push(b('Pause', 'plain', () => lifecycle(sb.id, 'pause')));
  } else if (sb.state === 'stopped') {
    out.push(b('Start', 'plain', () => lifecycle(sb.id, 'start')));
  } else if (sb.state === 'paused') {
    out.push(b('Resume', 'plain', () => lifecycle(sb.id, 'resume')));
  }
  out.push(b('Delete', 'danger', () => remove(sb.id)));
  return out;
}

function render() {
  const tbody = $('#sandboxes tbody');
  const rows = [...state.sandboxes.values()].sort((a, b) => a.sb.created_at.localeCompare(b.sb.created_at));
  tbody.replaceChildren(...rows.map(({ sb, ports, domains }) => el('tr', { dataset: { id: sb.id }, class: sb.id === state.selected ? 'selected' : undefined },
    el('td', {}, el('code', {}, sb.id)),
    el('td', {}, sb.name || ''),
    // What it was created from: the template as its create named it, else
    // the image (often a content hash).
    el('td', { class: 'template' }, sb.template || el('code', {}, sb.image || '')),
    el('td', {}, el('span', { class: `state ${sb.state}` }, sb.state), sb.state_reason ? el('span', { class: 'note' }, ` (${sb.state_reason})`) : null),
    el('td', { class: 'age', title: when(sb.created_at) }, age(sb)),
    el('td', { class: 'deadline' }, deadline(sb)),
    el('td', { class: 'limits' }, limitsOf(sb)),
    el('td', {}, ...Object.entries(sb.labels || {}).map(([k, v]) => el('span', { class: 'label' }, `${k}=${v}`))),
    el('td', {}, sb.node || 'this daemon'),
    el('td', {}, ...ports.map((p) => el('div', {}, `${p.port}/${p.protocol} `, linkFor(p.public_url)))),
    el('td', {}, ...domains.map((d) => el('div', {}, linkFor(d.url)))),
    el('td', { class: 'actions' }, ...actionsFor(sb)),
  )));
  $('#empty').hidden = rows.length > 0;
  $('#count').textContent = rows.length ? `(${rows.length})` : '';
  if (!state.admin) $('#fig-running').textContent = rows.filter((r) => r.sb.state === 'running').length;
  const target = $('#exec-target');
  // The open sandbox is the one an action applies to; otherwise what was
  // chosen stays chosen across redraws.
  const chosen = state.execTarget || target.value;
  target.replaceChildren(...rows.filter((r) => r.sb.state === 'running')
    .map(({ sb }) => el('option', { value: sb.id }, sb.name ? `${sb.name} (${sb.id})` : sb.id)));
  if ([...target.options].some((o) => o.value === chosen)) target.value = chosen;
  renderDetailHead();
}

async function lifecycle(id, verb) {
  const buttons = document.querySelectorAll(`tr[data-id="${CSS.escape(id)}"] button`);
  buttons.forEach((b) => { b.disabled = true; });
  try {
    const sb = await api('POST', sbPath(id, `/${verb}`), {}, idemKey());
    if (verb === 'stop' || verb === 'pause') {
      if (state.term?.id === id) closeTerminal(`the sandbox was ${verb === 'stop' ? 'stopped' : 'paused'}`);
    }
    await loadDetails(sb);
    render();
  } catch (err) {
    buttons.forEach((b) => { b.disabled = false; });
    alert(`${verb} failed: ${err.message}`);
  }
}

// confirmDialog asks in a modal; it resolves true only for the OK button.
function confirmDialog(text, ok = 'Delete') {
  const dlg = $('#confirm');
  $('#confirm-text').textContent = text;
  $('#confirm-ok').textContent = ok;
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true });
    dlg.returnValue = '';
    dlg.showModal();
    $('#confirm-cancel').focus();
  });
}

async function remove(id) {
  const entry = state.sandboxes.get(id);
  const name = entry?.sb.name ? ` (${entry.sb.name})` : '';
  if (!await confirmDialog(`Delete sandbox ${id}${name}? Its files, ports and domains go with it.`)) return;
  const buttons = document.querySelectorAll(`tr[data-id="${CSS.escape(id)}"] button`);
  buttons.forEach((b) => { b.disabled = true; });
  try {
    await api('DELETE', sbPath(id), undefined, idemKey());
    state.sandboxes.delete(id);
    if (state.selected === id) closeDetail();
    render();
  } catch (err) {
    buttons.forEach((b) => { b.disabled = false; });
    alert(`Delete failed: ${err.message}`);
  }
}

// --- create ----------------------------------------------------------------

function parseLabels(s) {
  const out = {};
  for (const part of s.split(',').map((p) => p.trim()).filter(Boolean)) {
    const i = part.indexOf('=');
    if (i < 1) throw new Error(`label "${part}" is not key=value`);
    out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

// parseEnv reads KEY=VALUE lines; the value is kept as typed (spaces and
// '=' included), blank lines and # comments are skipped.
function parseEnv(s) {
  const out = {};
  for (const [n, line] of s.split('\n').entries()) {
    if (!line.trim() || line.trim().startsWith('#')) continue;
    const i = line.indexOf('=');
    const key = i < 0 ? line.trim() : line.slice(0, i).trim();
    if (i < 0 || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new Error(`environment line ${n + 1} is not KEY=VALUE with a name of letters, digits and _`);
    out[key] = line.slice(i + 1);
  }
  return out;
}

const list = (s) => s.split(',').map((p) => p.trim()).filter(Boolean);

function number(sel, what, { integer = false } = {}) {
  const v = $(sel).value.trim();
  if (!v) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
    throw new Error(`${what} must be a ${integer ? 'whole ' : ''}number above 0`);
  }
  return n;
}

function createBody() {
  const body = {};
  const name = $('#create-name').value.trim();
  const image = $('#create-image').value.trim();
  const template = $('#create-template').value.trim();
  if (name) body.name = name;
  if (image && template) throw new Error('give an image or a template, not both');
  if (image) body.image = image;
  if (template) body.template = template;
  const labels = parseLabels($('#create-labels').value);
  if (Object.keys(labels).length) body.labels = labels;
  const env = parseEnv($('#create-env').value);
  if (Object.keys(env).length) body.env = env;
  const cpu = number('#create-cpu', 'CPU');
  const memory = number('#create-memory', 'Memory', { integer: true });
  const timeout = number('#create-timeout', 'Timeout', { integer: true });
  if (cpu) body.cpu = cpu;
  if (memory) body.memory_mb = memory;
  if (timeout) body.timeout_s = timeout;
  const network = {};
  const egress = $('#create-egress').value;
  if (egress) network.egress = egress;
  const allow = list($('#create-allow').value);
  if (allow.length) network.allow = allow;
  const domains = list($('#create-allow-domains').value);
  if (domains.length) network.allow_domains = domains;
  if (Object.keys(network).length) body.network = network;
  return body;
}

async function create(ev) {
  ev.preventDefault();
  const status = $('#create-status');
  let body;
  try {
    body = createBody();
  } catch (err) {
    status.textContent = err.message;
    status.className = 'error';
    return;
  }
  status.textContent = 'creating…';
  status.className = 'note';
  const button = $('#create button[type=submit]');
  button.disabled = true;
  const started = performance.now();
  try {
    // One key per click: a retried click after a lost answer would be a
    // new create anyway, but the browser's own retry is not.
    const sb = await api('POST', '/v1/sandboxes', body, idemKey());
    status.textContent = `created ${sb.id} in ${((performance.now() - started) / 1000).toFixed(1)} s`;
    await loadDetails(sb);
    render();
    $('#create').reset();
  } catch (err) {
    status.textContent = `failed: ${err.message}`;
    status.className = 'error';
  } finally {
    button.disabled = false;
  }
}

// --- the sandbox's panel -----------------------------------------------------

function openDetail(id) {
  if (state.selected !== id) {
    closeTerminal();
    state.selected = id;
    // What the panel showed was the previous sandbox's.
    $('#files tbody').replaceChildren();
    $('#files-status').textContent = '';
    $('#logs').textContent = '';
    $('#stats').replaceChildren();
  }
  $('#detail').hidden = false;
  // "Run a command" runs in the sandbox whose panel is open.
  state.execTarget = id;
  render();
  showTab(state.tab);
  $('#detail').scrollIntoView({ block: 'start' });
}

function closeDetail() {
  closeTerminal();
  state.selected = '';
  $('#detail').hidden = true;
  document.querySelectorAll('tr.selected').forEach((tr) => tr.classList.remove('selected'));
}

function renderDetailHead() {
  if (!state.selected) return;
  const entry = state.sandboxes.get(state.selected);
  if (!entry) {
    $('#detail-state').textContent = 'deleted';
    $('#detail-state').className = 'state error';
    closeTerminal('the sandbox is gone');
    return;
  }
  $('#detail-id').textContent = entry.sb.id;
  $('#detail-name').textContent = entry.sb.name || '';
  $('#detail-state').textContent = entry.sb.state;
  $('#detail-state').className = `state ${entry.sb.state}`;
  if (!$('#tab-ports').hidden) renderPorts(entry);
}

function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll('#tabs button')) b.setAttribute('aria-selected', String(b.dataset.tab === tab));
  for (const t of document.querySelectorAll('#detail .tab')) t.hidden = t.id !== `tab-${tab}`;
  const id = state.selected;
  if (!id) return;
  if (tab === 'terminal' && !state.term) openTerminal(id);
  if (tab === 'terminal') state.term?.fit.fit();
  if (tab === 'logs') refreshLogs();
  if (tab === 'files' && !$('#files tbody').children.length) listFiles();
  if (tab === 'ports') renderPorts(state.sandboxes.get(id));
  if (tab === 'stats') refreshStats();
}

// --- terminal ---------------------------------------------------------------

// openTerminal connects xterm to GET /v1/sandboxes/{id}/pty. A browser
// cannot put an Authorization header on a WebSocket, so the token goes as
// the subprotocol bearer.<token> beside sandpit.pty (never in the URL, which
// access logs keep).
function openTerminal(id) {
  closeTerminal();
  const status = $('#term-status');
  const entry = state.sandboxes.get(id);
  if (entry && entry.sb.state !== 'running') {
    status.textContent = `the sandbox is ${entry.sb.state}: start it to open a terminal`;
    return;
  }
  const box = $('#xterm');
  box.replaceChildren();
  const xterm = new window.Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000 });
  const fit = new window.FitAddon.FitAddon();
  xterm.loadAddon(fit);
  xterm.open(box);
  fit.fit();
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${sbPath(id, '/pty')}?cols=${xterm.cols}&rows=${xterm.rows}`;
  let ws;
  try {
    ws = new WebSocket(url, ['sandpit.pty', `bearer.${state.token}`]);
  } catch (err) {
    xterm.dispose();
    status.textContent = `cannot open the terminal: ${err.message}`;
    return;
  }
  ws.binaryType = 'arraybuffer';
  const t = { id, xterm, fit, ws, observer: null, ended: false };
  state.term = t;
  status.textContent = 'connecting…';
  $('#term-connect').disabled = true;
  $('#term-disconnect').disabled = false;
  const encoder = new TextEncoder();
  ws.onopen = () => {
    status.textContent = `connected to ${id}`;
    xterm.focus();
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data !== 'string') {
      xterm.write(new Uint8Array(ev.data));
      return;
    }
    let m = {};
    try { m = JSON.parse(ev.data); } catch { /* not a control message */ }
    if (m.type === 'exit') {
      t.ended = true;
      status.textContent = `the shell exited with code ${m.exit_code}`;
    } else if (m.type === 'error') {
      status.textContent = `terminal: ${m.message}`;
    }
  };
  ws.onclose = (ev) => {
    if (state.term !== t) return;
    if (!t.ended) status.textContent = ev.code === 1000 ? 'disconnected' : `disconnected (${ev.reason || `code ${ev.code}`})`;
    $('#term-connect').disabled = false;
    $('#term-disconnect').disabled = true;
  };
  xterm.onData((d) => { if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(d)); });
  xterm.onResize(({ cols, rows }) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
  });
  t.observer = new ResizeObserver(() => { if (!box.closest('[hidden]')) fit.fit(); });
  t.observer.observe(box);
}

function closeTerminal(why) {
  const t = state.term;
  if (!t) return;
  state.term = null;
  t.observer?.disconnect();
  t.ws.onclose = null;
  t.ws.close(1000, 'closed by the page');
  t.xterm.dispose();
  $('#xterm').replaceChildren();
  $('#term-status').textContent = why ? `disconnected: ${why}` : 'not connected';
  $('#term-connect').disabled = false;
  $('#term-disconnect').disabled = true;
}

// terminalText is the terminal's buffer as text, for tests and copy.
function terminalText() {
  const t = state.term;
  if (!t) return '';
  const buf = t.xterm.buffer.active;
  const lines = [];
  for (let i = 0; i < buf.length; i++) lines.push(buf.getLine(i)?.translateToString(true) ?? '');
  return lines.join('\n');
}
window.sandpitDashboard = { terminalText };

// --- logs -------------------------------------------------------------------

async function refreshLogs() {
  const out = $('#logs');
  const id = state.selected;
  out.textContent = 'loading…';
  try {
    const res = await request('GET', `${sbPath(id, '/files')}?path=${enc(START_LOG)}`);
    const text = await res.text();
    if (state.selected === id) out.textContent = text || '(the start command has written nothing yet)';
  } catch (err) {
    if (state.selected !== id) return;
    out.textContent = err.status === 404 || /no such file|not found/i.test(err.message)
      ? 'No log: this sandbox has no start command (logs show the output of a template\'s start command).'
      : `Logs unavailable: ${err.message}`;
  }
}

// --- files ------------------------------------------------------------------

// listFiles lists a directory through the agent protocol, which the API
// passes through (a Connect unary call is a plain JSON POST).
async function listFiles(ev) {
  ev?.preventDefault();
  const id = state.selected;
  const dir = $('#files-path').value.trim() || '/';
  const status = $('#files-status');
  status.textContent = 'listing…';
  status.className = 'note';
  try {
    const res = await api('POST', sbPath(id, '/agent/filesystem.Filesystem/ListDir'), { path: dir, depth: 1 }, { 'Connect-Protocol-Version': '1' });
    const entries = (res.entries || []).sort((a, b) => (a.type === b.type ? a.name.localeCompare(b.name) : a.type === 'FILE_TYPE_DIRECTORY' ? -1 : 1));
    $('#files tbody').replaceChildren(...entries.map((e) => {
      const isDir = e.type === 'FILE_TYPE_DIRECTORY';
      return el('tr', { dataset: { path: e.path } },
        el('td', {}, isDir ? el('a', { href: '#', onclick: (ev2) => { ev2.preventDefault(); $('#files-path').value = e.path; listFiles(); } }, `${e.name}/`) : e.name),
        el('td', {}, isDir ? 'directory' : e.type === 'FILE_TYPE_SYMLINK' ? `link to ${e.symlinkTarget || '?'}` : 'file'),
        el('td', {}, isDir ? '' : bytes(e.size)),
        el('td', {}, when(e.modifiedTime)),
        el('td', {}, isDir ? '' : el('button', { class: 'plain', onclick: () => download(id, e.path, e.name) }, 'Download')));
    }));
    status.textContent = `${entries.length} entries in ${dir}`;
  } catch (err) {
    status.textContent = `cannot list ${dir}: ${err.message}`;
    status.className = 'error';
  }
}

async function download(id, path, name) {
  const status = $('#files-status');
  try {
    const res = await request('GET', `${sbPath(id, '/files')}?path=${enc(path)}`);
    const url = URL.createObjectURL(await res.blob());
    const a = el('a', { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    status.textContent = `downloaded ${path}`;
  } catch (err) {
    status.textContent = `download failed: ${err.message}`;
    status.className = 'error';
  }
}

async function upload(ev) {
  ev.preventDefault();
  const id = state.selected;
  const file = $('#files-upload-input').files[0];
  const status = $('#files-status');
  if (!file) {
    status.textContent = 'choose a file first';
    return;
  }
  const dir = ($('#files-path').value.trim() || '/').replace(/\/+$/, '');
  const path = `${dir}/${file.name}`;
  status.textContent = `uploading ${file.name} (${bytes(file.size)})…`;
  try {
    await request('PUT', `${sbPath(id, '/files')}?path=${enc(path)}`, { raw: file, headers: { 'Content-Type': 'application/octet-stream' } });
    status.textContent = `uploaded ${path}`;
    $('#files-upload').reset();
    await listFiles();
  } catch (err) {
    status.textContent = `upload failed: ${err.message}`;
    status.className = 'error';
  }
}

// --- ports and domains ---------------------------------------------------------

function renderPorts(entry) {
  if (!entry) return;
  const id = entry.sb.id;
  $('#ports tbody').replaceChildren(...entry.ports.map((p) => el('tr', { dataset: { port: p.port } },
    el('td', {}, p.port), el('td', {}, p.protocol), el('td', {}, linkFor(p.public_url)),
    el('td', {}, el('button', { class: 'plain', onclick: () => unexpose(id, p.port) }, 'Remove')))));
  $('#domains tbody').replaceChildren(...entry.domains.map((d) => el('tr', {},
    el('td', {}, d.hostname), el('td', {}, d.port), el('td', {}, linkFor(d.url)),
    el('td', {}, el('button', { class: 'plain', onclick: () => removeDomain(id, d.hostname) }, 'Remove')))));
}

async function withStatus(sel, fn) {
  const status = $(sel);
  status.textContent = '…';
  status.className = 'note';
  try {
    status.textContent = (await fn()) || '';
    await refreshOne(state.selected);
  } catch (err) {
    status.textContent = `failed: ${err.message}`;
    status.className = 'error';
  }
}

function expose(ev) {
  ev.preventDefault();
  const id = state.selected;
  withStatus('#expose-status', async () => {
    const port = Number($('#expose-port').value);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error('the port must be from 1 to 65535');
    const p = await api('POST', sbPath(id, '/ports'), { port, protocol: $('#expose-protocol').value }, idemKey());
    $('#expose').reset();
    return `${p.reused ? 'already exposed' : 'exposed'} at ${p.public_url}`;
  });
}

function unexpose(id, port) {
  withStatus('#expose-status', async () => {
    await api('DELETE', sbPath(id, `/ports/${port}`), undefined, idemKey());
    return `port ${port} removed`;
  });
}

function addDomain(ev) {
  ev.preventDefault();
  const id = state.selected;
  withStatus('#domain-status', async () => {
    const hostname = $('#domain-host').value.trim();
    const port = Number($('#domain-port').value);
    if (!hostname) throw new Error('give a hostname');
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error('the port must be from 1 to 65535');
    const d = await api('POST', sbPath(id, '/custom-domains'), { hostname, port }, idemKey());
    $('#domain').reset();
    return `added ${d.url}`;
  });
}

function removeDomain(id, hostname) {
  withStatus('#domain-status', async () => {
    await api('DELETE', sbPath(id, `/custom-domains/${enc(hostname)}`), undefined, idemKey());
    return `${hostname} removed`;
  });
}

// --- stats ---------------------------------------------------------------------

function ofLimit(used, limit) {
  if (!limit) return `${bytes(used)} (no limit)`;
  return `${bytes(used)} of ${bytes(limit)} (${Math.round((used / limit) * 100)} %)`;
}

async function refreshStats() {
  const id = state.selected;
  const note = $('#stats-note');
  try {
    const s = await api('GET', sbPath(id, '/stats'));
    if (state.selected !== id) return;
    // The engine counts whole CPUs; a fractional limit is the sandbox's.
    const cpu = state.sandboxes.get(id)?.sb.cpu;
    const quota = cpu && cpu !== s.cpu_count ? ` (limited to ${cores(cpu)})` : '';
    const rows = [
      ['CPU', `${s.cpu_used_percent.toFixed(1)} % of ${s.cpu_count ? cores(s.cpu_count) : 'the host'}${quota}`],
      ['Memory', ofLimit(s.memory_used_bytes, s.memory_limit_bytes)],
      ['Disk', ofLimit(s.disk_used_bytes, s.disk_limit_bytes)],
      ['Sampled', when(s.time)],
    ];
    $('#stats').replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', { dataset: { stat: k.toLowerCase() } }, v)]));
    note.textContent = 'Refreshed every 5 seconds while shown.';
  } catch (err) {
    if (state.selected !== id) return;
    $('#stats').replaceChildren();
    note.textContent = err.code === 'not_running' ? 'Stats are for a running sandbox.' : `Stats unavailable: ${err.message}`;
  }
}

// --- exec ------------------------------------------------------------------

async function runExec(ev) {
  ev.preventDefault();
  const id = $('#exec-target').value;
  state.execTarget = id;
  const cmd = $('#exec-cmd').value;
  if (!id || !cmd.trim()) return;
  const term = $('#terminal');
  term.append(el('span', { class: 'cmd' }, `${id}$ ${cmd}\n`));
  try {
    const res = await api('POST', sbPath(id, '/exec'), { cmd: 'sh', args: ['-c', cmd], timeout_s: 60 });
    if (res.stdout) term.append(res.stdout);
    if (res.stderr) term.append(el('span', { class: 'err' }, res.stderr));
    if (res.exit_code !== 0) term.append(el('span', { class: 'err' }, `[exit ${res.exit_code}]\n`));
  } catch (err) {
    term.append(el('span', { class: 'err' }, `error: ${err.message}\n`));
  }
  term.scrollTop = term.scrollHeight;
  $('#exec-cmd').value = '';
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
      el('td', {}, b.id ? el('code', {}, b.id) : '', b.created_at ? ` ${when(b.created_at)}` : ''),
      el('td', {}, t.image ? el('code', {}, t.image) : ''),
      el('td', { class: 'error' }, b.error || ''));
  }));
  $('#tpl-empty').hidden = rows.length > 0;
  $('#tpl-count').textContent = rows.length ? `(${rows.length})` : '';
  $('#template-names').replaceChildren(...rows.filter((t) => t.name && t.build?.state === 'ready').map((t) => el('option', { value: t.name })));
}

// --- admin: tokens, owners, cluster ------------------------------------------------

async function refreshAdmin() {
  if (!state.admin) return;
  let tokens = [];
  try {
    tokens = (await api('GET', '/v1/tokens?include_revoked=true')).tokens || [];
  } catch (err) {
    $('#token-status').textContent = `tokens unavailable: ${err.message}`;
    return;
  }
  $('#tokens tbody').replaceChildren(...tokens.map((t) => el('tr', { dataset: { token: t.name } },
    el('td', {}, t.name), el('td', {}, t.owner), el('td', {}, (t.scopes || []).join(', ')),
    el('td', {}, el('code', {}, t.prefix)), el('td', {}, when(t.created_at)),
    el('td', {}, t.last_used_at ? when(t.last_used_at) : 'never'),
    el('td', {}, t.expires_at ? when(t.expires_at) : 'never'),
    el('td', {}, t.revoked_at ? el('span', { class: 'state error' }, 'revoked') : el('span', { class: 'state running' }, 'active')),
    el('td', {}, t.revoked_at ? '' : el('button', { class: 'danger', onclick: () => revokeToken(t.name) }, 'Revoke')))));
  $('#tokens-empty').hidden = tokens.length > 0;
  const owners = [...new Set(tokens.filter((t) => !t.revoked_at).map((t) => t.owner))].sort();
  const limits = await Promise.all(owners.map((o) => api('GET', `/v1/owners/${enc(o)}/limits`).catch(() => null)));
  $('#owners tbody').replaceChildren(...owners.map((o, i) => {
    const l = limits[i];
    if (!l) return el('tr', {}, el('td', {}, o), el('td', { colspan: 6, class: 'note' }, 'unavailable'));
    const u = l.usage;
    const lim = l.limits;
    const cap = (used, max, fmt = (x) => x) => (max ? `${fmt(used)} of ${fmt(max)}` : `${fmt(used)}`);
    const caps = [];
    if (lim.max_sandbox_cpu) caps.push(`≤ ${cores(lim.max_sandbox_cpu)} a sandbox`);
    if (lim.max_sandbox_memory_mb) caps.push(`≤ ${mib(lim.max_sandbox_memory_mb)} a sandbox`);
    return el('tr', { dataset: { owner: o } }, el('td', {}, o),
      el('td', {}, cap(u.sandboxes, lim.max_sandboxes)), el('td', {}, cap(u.cpu, lim.max_cpu)),
      el('td', {}, cap(u.memory_mb, lim.max_memory_mb, mib)), el('td', {}, cap(u.ports, lim.max_ports)),
      el('td', {}, cap(u.domains, lim.max_domains)), el('td', { class: 'note' }, caps.join(', ') || 'no per-sandbox caps'));
  }));
}

async function createToken(ev) {
  ev.preventDefault();
  const status = $('#token-status');
  const name = $('#token-name').value.trim();
  if (!name) {
    status.textContent = 'give the token a name';
    status.className = 'error';
    return;
  }
  const body = { name };
  const owner = $('#token-owner').value.trim();
  if (owner) body.owner = owner;
  const scope = $('#token-scope').value;
  if (scope) body.scopes = [scope];
  const days = Number($('#token-expires').value || 0);
  if (days > 0) body.expires_in_s = Math.round(days * 86400);
  try {
    const t = await api('POST', '/v1/tokens', body, idemKey());
    status.textContent = `created ${t.name} for ${t.owner}`;
    status.className = 'note';
    const secret = $('#token-secret');
    secret.replaceChildren('The token, shown once: ', el('code', {}, t.token));
    secret.hidden = false;
    $('#token-create').reset();
    refreshAdmin();
  } catch (err) {
    status.textContent = `failed: ${err.message}`;
    status.className = 'error';
  }
}

async function revokeToken(name) {
  if (!await confirmDialog(`Revoke token ${name}? Its streams end and every request with it is refused.`, 'Revoke')) return;
  try {
    await api('DELETE', `/v1/tokens/${enc(name)}`, undefined, idemKey());
  } catch (err) {
    alert(`Revoke failed: ${err.message}`);
  }
  refreshAdmin();
}

// refreshCluster shows the members when the daemon is a cluster node; a
// daemon without --cluster has no /v1/cluster and the section stays hidden.
async function refreshCluster() {
  let m;
  try {
    // GET /v1/status says whether this daemon is a cluster node, without
    // the 404 a plain daemon gives /v1/cluster/members.
    const st = await api('GET', '/v1/status');
    if (!st.cluster?.enabled) throw new Error('not a cluster');
    m = await api('GET', '/v1/cluster/members');
  } catch {
    $('#cluster').hidden = true;
    return;
  }
  $('#cluster').hidden = false;
  $('#cluster-node').textContent = `(this page is served by ${m.node})`;
  $('#members tbody').replaceChildren(...(m.members || []).map((x) => el('tr', { dataset: { member: x.name } },
    el('td', {}, x.name, x.name === m.node ? el('span', { class: 'note' }, ' (this node)') : null),
    el('td', {}, el('span', { class: `state ${x.state === 'alive' ? 'running' : 'error'}` }, x.state)),
    el('td', {}, x.leader ? 'leader' : x.voter ? 'voter' : 'non-voter'),
    el('td', {}, el('code', {}, x.meta?.api || '')),
    el('td', {}, x.meta?.max ? `${x.meta.running} of ${x.meta.max}` : `${x.meta?.running ?? 0}`),
    el('td', {}, x.placements),
    el('td', {}, x.draining || x.meta?.draining ? 'yes' : 'no'))));
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
  live.textContent = 'connecting';
  live.className = 'badge off';
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

function feed(ev) {
  const what = ev.type?.startsWith('template.')
    ? `template ${ev.template || ev.template_id} build ${ev.build_id}: ${ev.state}${ev.error ? ` (${ev.error})` : ''}`
    : ev.network
      ? `${ev.sandbox_id}: network ${ev.network.message || ev.network.reason}`
      : `${ev.sandbox_id}: ${ev.old_state ? `${ev.old_state} → ` : ''}${ev.state || 'gone'}`;
  const li = el('li', { dataset: { type: ev.type || '' } },
    el('time', {}, ev.time ? new Date(ev.time).toLocaleTimeString() : ''), ' ',
    el('span', { class: 'label' }, ev.type || 'event'), ' ', what, ev.node ? el('span', { class: 'note' }, ` on ${ev.node}`) : null);
  const list = $('#feed');
  list.prepend(li);
  while (list.children.length > FEED_MAX) list.lastChild.remove();
}

function onEvent(ev) {
  feed(ev);
  if (ev.type && ev.type.startsWith('template.')) {
    refreshTemplates();
    return;
  }
  if (ev.type === 'deleted' || ev.type === 'expired') {
    state.sandboxes.delete(ev.sandbox_id);
    render();
    return;
  }
  if (ev.sandbox_id) refreshOne(ev.sandbox_id);
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
  if (!state.admin) {
    // A personal token sees no daemon-wide figures (/metrics is the
    // admin's); render() counts its own sandboxes instead.
    $('#figures').classList.add('personal');
    note.textContent = 'The daemon-wide figures are for the admin token; the count above is of your sandboxes.';
    return;
  }
  $('#figures').classList.remove('personal');
  try {
    const res = await fetch('/metrics', { headers: { Authorization: `Bearer ${state.token}` } });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const m = parseMetrics(await res.text());
    $('#fig-running').textContent = sum(m, 'sandpit_sandboxes', { state: 'running' });
    let total = 0;
    for (const path of ['cold', 'warm', 'replayed', 'deduplicated']) {
      const n = sum(m, 'sandpit_creates_total', { path });
      total += n;
      $(`#fig-creates-${path}`).textContent = n;
    }
    $('#fig-creates-total').textContent = total;
    for (const outcome of ['acquired', 'replay', 'in_flight', 'mismatch']) {
      $(`#fig-idem-${outcome}`).textContent = sum(m, 'sandpit_idempotency_outcomes_total', { outcome });
    }
    $('#fig-pool').textContent = m.has('sandpit_pool_ready') ? `${sum(m, 'sandpit_pool_ready')} ready` : 'off (serve --warm-pool base=2 keeps sandboxes ready)';
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
  $('#exec-target').addEventListener('change', (ev) => { state.execTarget = ev.target.value; });
  $('#detail-close').addEventListener('click', closeDetail);
  for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => showTab(b.dataset.tab));
  $('#term-connect').addEventListener('click', () => state.selected && openTerminal(state.selected));
  $('#term-disconnect').addEventListener('click', () => closeTerminal());
  $('#logs-refresh').addEventListener('click', refreshLogs);
  $('#files-list').addEventListener('submit', listFiles);
  $('#files-upload').addEventListener('submit', upload);
  $('#expose').addEventListener('submit', expose);
  $('#domain').addEventListener('submit', addDomain);
  $('#token-create').addEventListener('submit', createToken);
  for (const b of document.querySelectorAll('#pages button')) b.addEventListener('click', () => showPage(b.dataset.page));
  if (state.token) {
    signIn(state.token).catch(() => signOut('Please sign in again.'));
  } else {
    checkDaemon();
  }
});
