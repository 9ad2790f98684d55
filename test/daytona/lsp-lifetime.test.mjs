// A language server outlives the bound on each of its requests. The daemon
// bounds one LSP request with --daytona-lsp-timeout; that bound must end the
// wait, never the server, so a server that answered once still answers after
// the bound has passed. (The agent takes a stream's deadline as the
// process's own, so a request carrying the bound as a deadline would have
// the server killed that long after it.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { openSuite, closeSuite } from './daemon.mjs';

const boundSeconds = 10;
const baseImage = process.env.SANDPIT_BASE_IMAGE_REF || 'sandpit/base:latest';
const suite = 'lsp-life-' + randomBytes(4).toString('hex');
let d;
let daytona;
let sb;

before(async () => {
  ({ d, daytona } = await openSuite({ args: ['--daytona-lsp-timeout', `${boundSeconds}s`] }));
  sb = await daytona.create({ image: baseImage, labels: { suite } });
});

after(() => closeSuite({ d, daytona, sb }));

test('a language server still answers after its requests\' bound has passed', { timeout: 180_000 }, async (t) => {
  if ((await sb.process.executeCommand('command -v pylsp')).exitCode !== 0) {
    t.skip(`${baseImage} has no pylsp: run scripts/build-base-image.sh`);
    return;
  }
  const src = 'def greet(name):\n    return "hi " + name\n';
  await sb.fs.uploadFile(Buffer.from(src), '/tmp/life/main.py');
  const lsp = await sb.createLspServer('python', '/tmp/life');
  await lsp.start();
  await lsp.didOpen('/tmp/life/main.py');
  const first = await lsp.documentSymbols('/tmp/life/main.py');
  assert.ok(first.some((s) => s.name === 'greet'), JSON.stringify(first));

  // Past the bound of every request made so far (initialize, symbols).
  await sleep((boundSeconds + 2) * 1000);

  const again = await lsp.documentSymbols('/tmp/life/main.py');
  assert.ok(again.some((s) => s.name === 'greet'), JSON.stringify(again));
  const listed = await sb.process.executeCommand('pgrep -c pylsp');
  assert.equal(listed.result.trim(), '1', 'one pylsp, the one started');
  await lsp.stop();
});
