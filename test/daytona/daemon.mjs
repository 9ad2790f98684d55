// Starts a real sandpit daemon for the Daytona SDK tests, and cleans up after
// it: the binary is built once per run, containers are tagged with a label
// unique to the run, and everything carrying that label is removed at the end.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const testImage = process.env.SANDPIT_TEST_IMAGE || 'sandpit/base:test';

// freePort asks the kernel for a free port. It is released before the daemon
// binds it, which leaves a small window for a clash; the daemon then fails to
// start and the test says so.
function freePort() {
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
// `sandpit serve` on free loopback ports with a fresh data directory.
export async function startDaemon() {
  ensureImage();
  const dir = mkdtempSync(join(tmpdir(), 'sandpit-daytona-'));
  let bin = process.env.SANDPIT_BIN;
  if (!bin) {
    bin = join(dir, 'sandpit');
    execFileSync('go', ['build', '-o', bin, './cmd/sandpit'], {
      cwd: repoRoot,
      stdio: 'inherit',
      env: { ...process.env, CGO_ENABLED: '0' },
    });
  }
  const apiPort = await freePort();
  const proxyPort = await freePort();
  const token = 'daytona-test-' + randomBytes(12).toString('hex');
  const run = 'daytona-' + randomBytes(6).toString('hex');
  const runLabel = `sandpit.run=${run}`;
  const logs = [];
  const child = spawn(bin, [
    'serve',
    '--data-dir', join(dir, 'data'),
    '--listen', `127.0.0.1:${apiPort}`,
    '--proxy-listen', `127.0.0.1:${proxyPort}`,
    '--token', token,
    '--default-image', testImage,
    '--container-label', runLabel,
    '--network-name', `sandpit-${run}`,
    '--network-pool', '10.200.0.0/14',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  for (const s of [child.stdout, child.stderr]) {
    s.setEncoding('utf8');
    s.on('data', (d) => {
      logs.push(d);
      if (process.env.SANDPIT_LOG) process.stderr.write(d);
    });
  }
  const base = `http://127.0.0.1:${apiPort}`;
  try {
    await waitHealthy(`${base}/health`, child, 30_000);
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`${err.message}\n--- daemon log ---\n${logs.join('')}`);
  }
  return {
    apiUrl: `${base}/daytona`,
    base,
    proxyPort,
    token,
    runLabel,
    logs,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
        await exited;
        clearTimeout(timer);
      }
      // The daemon removes nothing on shutdown (sandboxes outlive it), so
      // everything this run made is removed by its label.
      for (const c of containersWithLabel(runLabel)) {
        try {
          docker('rm', '-f', c.id);
        } catch {
          // Already gone.
        }
      }
      // The daemon keeps its network and firewall rules while sandboxes
      // run; with the containers gone, uninstall removes both.
      execFileSync(bin, ['uninstall', '--network-name', `sandpit-${run}`], { stdio: 'inherit' });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
