// The docs' runnable blocks (```js runnable) run as written: each is saved
// as the .mjs file the docs tell users to save, beside the SDK it imports
// (test/e2b has e2b and @e2b/code-interpreter, test/daytona the Daytona
// SDK), and run with the environment the docs tell users to export: the
// doc's first ```sh block of exports, run by bash as written (its
// `sandpit token path` with `sandpit` from PATH, as the README's set-up
// installs it), with only the daemon's port replaced by the test daemon's. A block must exit 0; one that needs the
// code-interpreter image is skipped outside CI when the image is missing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile, writeFile, rm, mkdtemp, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import { setup, teardown, startDaemon, repoRoot } from './helpers.mjs';

const run = promisify(execFile);
const docs = ['docs/e2b.md', 'docs/daytona.md', 'docs/code-interpreter.md'];

// blocks returns the runnable blocks of one doc with the line each starts on.
async function blocks(doc) {
  const text = await readFile(join(repoRoot, doc), 'utf8');
  const out = [];
  const re = /^```js runnable\n([\s\S]*?)^```$/gm;
  for (let m; (m = re.exec(text)); ) {
    out.push({ doc, line: text.slice(0, m.index).split('\n').length, code: m[1] });
  }
  return out;
}

// dirFor is where a block's imports resolve.
function dirFor(code) {
  if (code.includes("from '@daytonaio/sdk'")) return join(repoRoot, 'test', 'daytona');
  return join(repoRoot, 'test', 'e2b');
}

async function haveImage(ref) {
  try {
    await run('docker', ['image', 'inspect', ref]);
    return true;
  } catch {
    return false;
  }
}

let d;
let pathDir; // holds `sandpit`, first on the PATH the docs' shell runs with
before(async () => {
  await setup();
  d = await startDaemon({ name: 'docs' });
  // The token where an installed daemon keeps it, for `sandpit token path`.
  await writeFile(join(d.dataDir, 'token'), `${d.token}\n`, { mode: 0o600 });
  pathDir = await mkdtemp(join(tmpdir(), 'sandpit-docs-path-'));
  await symlink(d.proc.spawnfile, join(pathDir, 'sandpit'));
});

// docEnv runs the doc's first shell block of exports with bash, as a user
// pastes it, and returns the environment it leaves.
const docEnvs = new Map();
async function docEnv(doc) {
  if (docEnvs.has(doc)) return docEnvs.get(doc);
  const text = await readFile(join(repoRoot, doc), 'utf8');
  const block = [...text.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]).find((b) => /^export /m.test(b));
  assert.ok(block, `${doc} has no shell block of exports`);
  const script = `set -euo pipefail\n${block.replaceAll('127.0.0.1:7420', `127.0.0.1:${d.apiPort}`)}\nenv -0`;
  const { stdout } = await run('bash', ['-c', script], {
    env: { ...process.env, PATH: `${pathDir}:${process.env.PATH}`, SANDPIT_DATA_DIR: d.dataDir, SANDPIT_TOKEN: '', SANDPIT_TOKEN_FILE: '' },
  });
  const env = Object.fromEntries(stdout.split('\0').filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
  docEnvs.set(doc, env);
  return env;
}
after(teardown);

const all = (await Promise.all(docs.map(blocks))).flat();

test('the docs have runnable blocks for E2B, Daytona and the code interpreter', () => {
  for (const doc of docs) assert.ok(all.some((b) => b.doc === doc), `${doc} has no js runnable block`);
});

for (const b of all) {
  test(`${b.doc}:${b.line} runs as written`, { timeout: 300_000 }, async (t) => {
    if (b.code.includes('@e2b/code-interpreter') && !(await haveImage('sandpit/code-interpreter:latest'))) {
      if (process.env.CI) assert.fail('sandpit/code-interpreter:latest is missing: scripts/build-code-interpreter-image.sh builds it');
      t.skip('sandpit/code-interpreter:latest is not built');
      return;
    }
    const file = join(dirFor(b.code), `.docs-${randomBytes(4).toString('hex')}.mjs`);
    await writeFile(file, b.code);
    t.after(() => rm(file, { force: true }));
    const env = await docEnv(b.doc === 'docs/code-interpreter.md' ? 'docs/e2b.md' : b.doc);
    for (const k of Object.keys(env).filter((k) => /^(E2B|DAYTONA)_/.test(k))) {
      assert.notEqual(env[k], '', `${b.doc}'s exports leave ${k} empty`);
    }
    await run(process.execPath, [file], { cwd: dirFor(b.code), env, timeout: 240_000 }).catch((err) => {
      if (process.env.SANDPIT_LOG_ON_FAIL) process.stderr.write(d.log);
      assert.fail(`${b.doc}:${b.line} failed (exit ${err.code}):\n${err.stdout}${err.stderr}`);
    });
  });
}
