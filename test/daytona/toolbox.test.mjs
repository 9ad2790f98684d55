// The rest of the Daytona toolbox through the official SDK, unmodified, on a
// real daemon and Docker: file search and edits, system metrics, snapshots,
// process sessions, PTYs, git and codeRun. The tests share one sandbox.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Daytona, DaytonaNotFoundError, DaytonaFileNotFoundError } from '@daytonaio/sdk';
import { startDaemon, testImage } from './daemon.mjs';

let d;
let daytona;
let sb;
const suite = 'toolbox-' + randomBytes(4).toString('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  d = await startDaemon();
  daytona = new Daytona({ apiUrl: d.apiUrl, apiKey: d.token });
  sb = await daytona.create({ labels: { suite } });
});

after(async () => {
  try {
    if (sb) await sb.delete();
  } finally {
    if (daytona && Symbol.asyncDispose) await daytona[Symbol.asyncDispose]();
    if (d) {
      if (process.env.SANDPIT_LOG_ON_FAIL && process.exitCode) process.stderr.write(d.logs.join(''));
      await d.stop();
    }
  }
});

test('fs.findFiles finds lines by content; fs.searchFiles finds files by glob', async () => {
  await sb.fs.uploadFile(Buffer.from('alpha\nneedle one\ngamma\n'), '/tmp/find/a.txt');
  await sb.fs.uploadFile(Buffer.from('needle two\n'), '/tmp/find/sub/b:c.md');
  await sb.fs.uploadFile(Buffer.from('nothing\n'), '/tmp/find/sub/c.txt');
  const matches = await sb.fs.findFiles('/tmp/find', 'needle');
  matches.sort((x, y) => x.file.localeCompare(y.file));
  assert.deepEqual(matches, [
    { file: '/tmp/find/a.txt', line: 2, content: 'needle one' },
    { file: '/tmp/find/sub/b:c.md', line: 1, content: 'needle two' },
  ]);
  assert.deepEqual(await sb.fs.findFiles('/tmp/find', 'absent-string'), []);
  const found = await sb.fs.searchFiles('/tmp/find', '*.txt');
  assert.deepEqual(found.files.sort(), ['/tmp/find/a.txt', '/tmp/find/sub/c.txt']);
});

test('fs.replaceInFiles replaces literally and reports per file', async () => {
  await sb.fs.uploadFile(Buffer.from('x.y x.y xzy\n'), '/tmp/replace/one.txt');
  const res = await sb.fs.replaceInFiles(['/tmp/replace/one.txt', '/tmp/replace/missing.txt'], 'x.y', 'Q');
  assert.equal(res.length, 2);
  assert.deepEqual(res[0], { file: '/tmp/replace/one.txt', success: true });
  assert.equal(res[1].success, false);
  assert.ok(res[1].error);
  assert.equal((await sb.fs.downloadFile('/tmp/replace/one.txt')).toString(), 'Q Q xzy\n');
});

test('fs.setFilePermissions sets mode, owner and group', async () => {
  await sb.fs.uploadFile(Buffer.from('#!/bin/sh\necho perm\n'), '/tmp/perm.sh');
  await sb.fs.setFilePermissions('/tmp/perm.sh', { mode: '750', owner: 'nobody', group: 'nogroup' });
  const info = await sb.fs.getFileDetails('/tmp/perm.sh');
  assert.equal(info.permissions, '0750');
  assert.equal(info.owner, 'nobody');
  assert.equal(info.group, 'nogroup');
  const r = await sb.process.executeCommand('/tmp/perm.sh');
  assert.equal(r.result.trim(), 'perm');
  await assert.rejects(sb.fs.setFilePermissions('/tmp/no-such-file', { mode: '644' }), DaytonaFileNotFoundError);
  await assert.rejects(sb.fs.setFilePermissions('/tmp/perm.sh', { mode: 'rwx' }), /octal/);
});

test('getMetricsLatest reports the sandbox\'s real use', async () => {
  const m = await sb.getMetricsLatest();
  assert.ok(m.memUsed > 0, `memUsed ${m.memUsed}`);
  assert.ok(m.memTotal >= m.memUsed);
  assert.ok(m.cpuCount >= 1);
  assert.ok(m.diskTotal > 0);
  assert.ok(m.timestamp instanceof Date);
});

test('sandbox.cpu/memory/disk report the allocation (the host\'s when no limit was asked)', async () => {
  assert.ok(sb.cpu >= 1);
  assert.ok(sb.memory >= 1);
  assert.ok(sb.disk >= 1);
});

test('snapshot.list presents the daemon\'s images; get finds one', async () => {
  const page = await daytona.snapshot.list();
  assert.ok(page.total >= 1);
  const s = page.items.find((x) => x.imageName === testImage);
  assert.ok(s, `no snapshot with image ${testImage}: ${JSON.stringify(page.items)}`);
  assert.equal(s.state, 'active');
  const got = await daytona.snapshot.get(s.name);
  assert.equal(got.imageName, testImage);
  await assert.rejects(daytona.snapshot.get('no-such-snapshot'), DaytonaNotFoundError);
});
