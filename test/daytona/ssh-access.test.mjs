// SSH access through the official SDK on a real daemon with its SSH
// endpoint: createSshAccess mints a token whose sshCommand logs in with
// Debian's OpenSSH client, validateSshAccess knows it, and revokeSshAccess
// ends it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSuite, closeSuite, freePort } from './daemon.mjs';

let d;
let daytona;
let sb;
let sshPort;
const suite = 'ssh-access-' + randomBytes(4).toString('hex');
const home = mkdtempSync(join(tmpdir(), 'sandpit-ssh-access-'));

before(async () => {
  sshPort = await freePort();
  ({ d, daytona } = await openSuite({ args: ['--ssh-listen', `127.0.0.1:${sshPort}`] }));
  sb = await daytona.create({ labels: { suite } });
});

after(async () => {
  await closeSuite({ d, daytona, sb });
  rmSync(home, { recursive: true, force: true });
});

// ssh runs the OpenSSH client with no key and no configuration of the
// machine's, the way a user pastes an sshCommand; it resolves to the exit
// code and the output.
function ssh(args) {
  const opts = ['-F', 'none', '-o', 'StrictHostKeyChecking=accept-new', '-o', `UserKnownHostsFile=${join(home, 'known_hosts')}`,
    '-o', 'PubkeyAuthentication=no', '-o', 'IdentityAgent=none', '-o', 'BatchMode=yes', '-o', 'LogLevel=ERROR'];
  return new Promise((resolve) => {
    execFile('ssh', [...opts, ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, out: stdout + stderr });
    });
  });
}

test('createSshAccess logs in with its sshCommand; validate and revoke work on that token only', { timeout: 120_000 }, async () => {
  const access = await sb.createSshAccess(10);
  assert.equal(access.sandboxId, sb.id);
  assert.ok(access.token.length > 20, access.token);
  assert.equal(access.sshCommand, `ssh -p ${sshPort} ${access.token}@127.0.0.1`);
  const minutes = (new Date(access.expiresAt) - Date.now()) / 60_000;
  assert.ok(minutes > 8 && minutes <= 10, `expires in ${minutes} minutes`);

  const [, ...args] = access.sshCommand.split(' ');
  const ran = await ssh([...args, 'echo in-$(hostname)-ok']);
  assert.equal(ran.code, 0, ran.out);
  assert.match(ran.out, /in-.*-ok/);

  assert.deepEqual(await sb.validateSshAccess(access.token), { valid: true, sandboxId: sb.id });
  const other = await sb.createSshAccess(5);
  assert.notEqual(other.token, access.token);

  await sb.revokeSshAccess(access.token);
  assert.deepEqual(await sb.validateSshAccess(access.token), { valid: false, sandboxId: '' });
  const refused = await ssh([...args, 'true']);
  assert.notEqual(refused.code, 0);
  assert.match(refused.out, /Permission denied/);
  // The other token still works; revoking again is not an error.
  assert.equal((await sb.validateSshAccess(other.token)).valid, true);
  await sb.revokeSshAccess(access.token);

  // Bad input changes nothing.
  await assert.rejects(sb.createSshAccess(0), (err) => err.statusCode === 400);
  await assert.rejects(sb.createSshAccess(60 * 24 + 1), (err) => err.statusCode === 400);
  await assert.rejects(sb.revokeSshAccess('not-a-token'), (err) => err.statusCode === 400);
  assert.equal((await sb.validateSshAccess(other.token)).valid, true);
  assert.equal((await sb.validateSshAccess('made-up')).valid, false);
});
