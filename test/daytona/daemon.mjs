// Starts a real sandpit daemon for the Daytona SDK tests, and cleans up after
// it: the binary is built once per run, containers are tagged with a label
// unique to the run, and everything carrying that label is removed at the end.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Daytona } from '@daytonaio/sdk';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const testImage = process.env.SANDPIT_TEST_IMAGE || 'sandpit/base:test';

// freePort asks the kernel for a free port. It is released before the daemon
// binds it, which leaves a small window for a clash; the daemon then fails to
// start and the test says so.
export function freePort() {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
  });
}

function docker(...args) {
  return execFileSync('docker', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

// containersWithLabel lists the containers (running or not) of this run.
export function containersWithLabel(label) {
  const out = docker('ps', '-a', '--filter', `label=${label}`, '--format', '{{.ID}} {{.Label "sandpit.sandbox-id"}}');
  return out === '' ? [] : out.split('\n').map((l) => {
    const [id, sandboxId] = l.split(' ');
    return { id, sandboxId };
  });
}

function ensureImage() {
  try {
    docker('image', 'inspect', testImage);
    return;
  } catch {
    // Built below.
  }
  const script = join(repoRoot, 'scripts', 'build-test-image.sh');
  if (!existsSync(script)) {
    throw new Error(`test image ${testImage} is missing and ${script} does not exist`);
  }
  execFileSync('bash', [script], { stdio: 'inherit', env: { ...process.env, SANDPIT_TEST_IMAGE: testImage } });
}

async function waitHealthy(url, child, deadlineMs) {
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`sandpit serve exited with ${child.exitCode} before it was healthy`);
    }
    try {
      const res = await fetch(url);
      if (res.ok) return;
    } catch {
      // Not listening yet.
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`sandpit serve not healthy within ${deadlineMs} ms`);
}

// startDaemon builds sandpit (unless SANDPIT_BIN names a binary) and runs
// `sandpit serve` on free loopback ports with a fresh data directory;
// extraArgs are added to its command line.
export async function startDaemon(extraArgs = []) {
  ensureImage();
  const dir = mkdtempSync(join(tmpdir(), 'sandpit-daytona-'));
  let bin = process.env.SANDPIT_BIN;
  if (!bin) {
    bin = join(dir, 'sandpit');
    // scripts/build.sh embeds the small agent, as an installed daemon has.
    execFileSync('bash', ['scripts/build.sh', '-o', bin], {
      cwd: repoRoot,
      stdio: 'inherit',
      env: { ...process.env, CGO_ENABLED: '0' },
    });
  }
  let apiPort = await freePort();
  let proxyPort = await freePort();
  const token = 'daytona-test-' + randomBytes(12).toString('hex');
  const run = 'daytona-' + randomBytes(6).toString('hex');
  const runLabel = `sandpit.run=${run}`;
  const logs = [];
  const args = () => [
    'serve',
    '--data-dir', join(dir, 'data'),
    '--listen', `127.0.0.1:${apiPort}`,
    '--proxy-listen', `127.0.0.1:${proxyPort}`,
    '--token', token,
    '--default-image', testImage,
    '--container-label', runLabel,
    '--network-name', `sandpit-${run}`,
    '--network-pool', '10.200.0.0/14',
    ...extraArgs,
  ];
  let base = `http://127.0.0.1:${apiPort}`;
  // spawnServe starts the daemon and waits until it is healthy.
  const spawnServe = async () => {
    const c = spawn(bin, args(), { stdio: ['ignore', 'pipe', 'pipe'] });
    for (const s of [c.stdout, c.stderr]) {
      s.setEncoding('utf8');
      s.on('data', (d) => {
        logs.push(d);
        if (process.env.SANDPIT_LOG) process.stderr.write(d);
      });
    }
    try {
      await waitHealthy(`${base}/health`, c, 30_000);
    } catch (err) {
      c.kill('SIGKILL');
      throw new Error(`${err.message}\n--- daemon log ---\n${logs.join('')}`);
    }
    return c;
  };
  // shutdown stops the daemon gracefully, killing it if it lingers.
  const shutdown = async (c) => {
    if (c.exitCode === null && c.signalCode === null) {
      const exited = new Promise((r) => c.once('exit', r));
      c.kill('SIGTERM');
      const timer = setTimeout(() => c.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    }
  };
  // freePort releases the port before the daemon binds it, so a suite
  // running beside this one can take it in between. The first start then
  // tries fresh ports; a restart keeps its ports, since callers hold the URLs.
  let child;
  for (let attempt = 1; ; attempt++) {
    try {
      child = await spawnServe();
      break;
    } catch (err) {
      if (attempt >= 5 || !String(err.message).includes('address already in use')) throw err;
      logs.push('--- port taken, retrying with other ports ---\n');
      apiPort = await freePort();
      proxyPort = await freePort();
      base = `http://127.0.0.1:${apiPort}`;
    }
  }
  return {
    apiUrl: `${base}/daytona`,
    base,
    proxyPort,
    token,
    runLabel,
    logs,
    // restart stops the daemon and starts it again on the same ports and
    // data directory; sandboxes outlive it.
    async restart() {
      await shutdown(child);
      child = await spawnServe();
    },
    async stop() {
      await shutdown(child);
      // The daemon removes nothing on shutdown (sandboxes outlive it), so
      // everything this run made is removed by its label.
      for (const c of containersWithLabel(runLabel)) {
        try {
          docker('rm', '-f', c.id);
        } catch {
          // Already gone.
        }
      }
      // Images the daemon built (snapshots, Images) carry the run's label.
      const images = docker('images', '-q', '--filter', `label=${runLabel}`);
      for (const id of new Set(images === '' ? [] : images.split('\n'))) {
        try {
          docker('rmi', '-f', id);
        } catch {
          // Already gone, or still used by another image of the run.
        }
      }
      // The daemon keeps its network and firewall rules while sandboxes
      // run; with the containers gone, uninstall removes both.
      execFileSync(bin, ['uninstall', '--network-name', `sandpit-${run}`], { stdio: 'inherit' });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// proxyGet asks the preview proxy for a host's root. *.localhost may not
// resolve here, so the request goes to the proxy's address with the host in
// the Host header.
export function proxyGet(proxyPort, host, path = '/', headers = {}) {
  return new Promise((res, rej) => {
    const req = request({ host: '127.0.0.1', port: proxyPort, path, headers: { ...headers, Host: host } }, (r) => {
      let body = '';
      r.setEncoding('utf8');
      r.on('data', (c) => (body += c));
      r.on('end', () => res({ status: r.statusCode, body }));
    });
    req.on('error', rej);
    req.end();
  });
}

// openSuite starts a daemon of its own for one test file and an SDK client on
// it, and, when labels are given, one sandbox carrying them.
export async function openSuite({ args = [], labels } = {}) {
  const d = await startDaemon(args);
  const daytona = new Daytona({ apiUrl: d.apiUrl, apiKey: d.token });
  const sb = labels ? await daytona.create({ labels }) : undefined;
  return { d, daytona, sb };
}

// closeSuite undoes openSuite: the sandbox, the client's event socket
// (Symbol.asyncDispose is missing before Node 20), then the daemon, whose log
// goes to stderr when SANDPIT_LOG_ON_FAIL is set and a test failed.
export async function closeSuite({ d, daytona, sb } = {}) {
  try {
    if (sb) await sb.delete();
  } finally {
    if (daytona && Symbol.asyncDispose) await daytona[Symbol.asyncDispose]();
    if (d) {
      if (process.env.SANDPIT_LOG_ON_FAIL && process.exitCode) process.stderr.write(d.logs.join(''));
      await d.stop();
    }
  }
}
