// The rest of the Daytona toolbox through the official SDK, unmodified, on a
// real daemon and Docker: file search and edits, system metrics, snapshots,
// process sessions, PTYs, git and codeRun. The tests share one sandbox.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { DaytonaNotFoundError, DaytonaFileNotFoundError } from '@daytonaio/sdk';
import { openSuite, closeSuite, testImage, proxyGet } from './daemon.mjs';

let d;
let daytona;
let sb;
const suite = 'toolbox-' + randomBytes(4).toString('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// echoHeaders is the header-echo server of test/testdata, for busybox nc
// -e: the sandbox's server answers with the headers it received.
const echoHeaders = readFileSync(new URL('../testdata/echo-headers.sh', import.meta.url), 'utf8');

before(async () => {
  ({ d, daytona, sb } = await openSuite({ labels: { suite } }));
});

after(() => closeSuite({ d, daytona, sb }));

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

test('sessions: cwd and env persist between commands; exit codes and stderr are per command', async () => {
  await sb.process.createSession('s1');
  const cd = await sb.process.executeSessionCommand('s1', { command: 'cd /tmp && export SESSION_VAR=kept' });
  assert.equal(cd.exitCode, 0);
  const pwd = await sb.process.executeSessionCommand('s1', { command: 'pwd' });
  assert.equal(pwd.stdout.trim(), '/tmp');
  const env = await sb.process.executeSessionCommand('s1', { command: 'echo "$SESSION_VAR"; echo oops >&2; false' });
  assert.equal(env.exitCode, 1);
  assert.equal(env.stdout.trim(), 'kept');
  assert.equal(env.stderr.trim(), 'oops');
  // A syntax error fails that command, not the session.
  const bad = await sb.process.executeSessionCommand('s1', { command: 'if then' });
  assert.notEqual(bad.exitCode, 0);
  assert.equal((await sb.process.executeSessionCommand('s1', { command: 'pwd' })).stdout.trim(), '/tmp');

  const s = await sb.process.getSession('s1');
  assert.equal(s.sessionId, 's1');
  assert.equal(s.commands.length, 5);
  assert.equal(s.commands[1].command, 'pwd');
  assert.equal(s.commands[1].exitCode, 0);
  const one = await sb.process.getSessionCommand('s1', pwd.cmdId);
  assert.equal(one.command, 'pwd');
  const logs = await sb.process.getSessionCommandLogs('s1', env.cmdId);
  assert.equal(logs.stdout.trim(), 'kept');
  assert.equal(logs.stderr.trim(), 'oops');
  await assert.rejects(sb.process.createSession('s1'), /already exists/);
});

test('sessions: an async command\'s logs stream while it runs', async () => {
  const started = await sb.process.executeSessionCommand('s1', {
    command: 'for i in 1 2 3; do echo "out $i"; echo "err $i" >&2; sleep 1; done',
    runAsync: true,
  });
  assert.ok(started.cmdId);
  assert.equal(started.exitCode, undefined);
  const t0 = Date.now();
  const seen = [];
  let out = '';
  let err = '';
  await sb.process.getSessionCommandLogs('s1', started.cmdId, (s) => {
    out += s;
    seen.push(Date.now() - t0);
  }, (s) => {
    err += s;
  });
  assert.equal(out, 'out 1\nout 2\nout 3\n');
  assert.equal(err, 'err 1\nerr 2\nerr 3\n');
  // The first line arrived well before the command ended (~3 s).
  assert.ok(seen[0] < 1500, `first chunk after ${seen[0]} ms`);
  const cmd = await sb.process.getSessionCommand('s1', started.cmdId);
  assert.equal(cmd.exitCode, 0);
  // The session went on running commands meanwhile: it is still in /tmp.
  assert.equal((await sb.process.executeSessionCommand('s1', { command: 'pwd' })).stdout.trim(), '/tmp');
});

test('sessions: list and delete', async () => {
  await sb.process.createSession('s2');
  const ids = (await sb.process.listSessions()).map((s) => s.sessionId).sort();
  assert.deepEqual(ids, ['s1', 's2']);
  await sb.process.deleteSession('s2');
  await sb.process.deleteSession('s1');
  assert.deepEqual(await sb.process.listSessions(), []);
  await assert.rejects(sb.process.executeSessionCommand('s1', { command: 'true' }), DaytonaNotFoundError);
  await assert.rejects(sb.process.deleteSession('nope'), DaytonaNotFoundError);
});

// ptyOutput collects a PTY's output and waits for text in it.
function ptyOutput() {
  let text = '';
  const waiters = [];
  return {
    onData(bytes) {
      text += Buffer.from(bytes).toString('utf8');
      for (const w of [...waiters]) {
        if (w.re.test(text)) {
          waiters.splice(waiters.indexOf(w), 1);
          clearTimeout(w.timer);
          w.resolve(text);
        }
      }
    },
    text: () => text,
    waitFor(re, ms = 10_000) {
      if (re.test(text)) return Promise.resolve(text);
      return new Promise((resolve, reject) => {
        const w = { re, resolve };
        waiters.push(w);
        w.timer = setTimeout(() => reject(new Error(`no ${re} in PTY output within ${ms} ms: ${JSON.stringify(text)}`)), ms);
      });
    },
  };
}

test('PTY: write echo hi, read hi; resize to 40x100 and stty size agrees; kill ends it', async () => {
  const out = ptyOutput();
  const pty = await sb.process.createPty({ id: 'p1', cols: 80, rows: 24, envs: { PTY_VAR: 'from-env' }, onData: out.onData });
  assert.ok(pty.isConnected());
  await pty.sendInput('echo hi\n');
  await out.waitFor(/\r?\nhi\r?\n/);
  await pty.sendInput('echo "v=$PTY_VAR"\n');
  await out.waitFor(/v=from-env/);
  await pty.resize(100, 40);
  await pty.sendInput('stty size\n');
  await out.waitFor(/40 100/);
  const info = await sb.process.getPtySessionInfo('p1');
  assert.equal(info.active, true);
  assert.deepEqual([info.cols, info.rows], [100, 40]);
  assert.deepEqual((await sb.process.listPtySessions()).map((s) => s.id), ['p1']);

  // A second client attaches to the same shell.
  await pty.disconnect();
  const out2 = ptyOutput();
  const again = await sb.process.connectPty('p1', { onData: out2.onData });
  await again.sendInput('echo second\n');
  await out2.waitFor(/second/);

  await again.kill();
  const res = await again.wait();
  assert.equal(typeof res.exitCode, 'number');
  assert.deepEqual(await sb.process.listPtySessions(), []);
  await assert.rejects(sb.process.getPtySessionInfo('p1'), DaytonaNotFoundError);
});

test('PTY: the shell exiting closes the socket with its exit code', async () => {
  const out = ptyOutput();
  const pty = await sb.process.createPty({ id: 'p2', onData: out.onData });
  await pty.sendInput('exit 3\n');
  const res = await pty.wait();
  assert.equal(res.exitCode, 3);
});

// The realistic image (scripts/build-base-image.sh) has git, python3 and node.
const baseImage = process.env.SANDPIT_BASE_IMAGE_REF || 'sandpit/base:latest';

test('git: clone a repository made in the sandbox, change, add, status, commit, branches, checkout, push, pull', { timeout: 180_000 }, async () => {
  const g = await daytona.create({ image: baseImage, labels: { suite } });
  try {
    // A bare origin with one commit, made with the sandbox's own git.
    const seed = await g.process.executeCommand([
      'set -e',
      'git init -q --bare --initial-branch=main /tmp/origin.git',
      'git clone -q /tmp/origin.git /tmp/seed',
      'cd /tmp/seed && echo one > README && git add README',
      'git -c user.name=seed -c user.email=seed@example.com commit -qm first',
      'git push -q origin main',
    ].join('\n'));
    assert.equal(seed.exitCode, 0, seed.result);

    await g.git.clone('file:///tmp/origin.git', '/tmp/work');
    let st = await g.git.status('/tmp/work');
    assert.equal(st.currentBranch, 'main');
    assert.deepEqual(st.fileStatus, []);

    await g.fs.uploadFile(Buffer.from('two\n'), '/tmp/work/README');
    await g.fs.uploadFile(Buffer.from('new\n'), '/tmp/work/NEW.txt');
    st = await g.git.status('/tmp/work');
    const byName = Object.fromEntries(st.fileStatus.map((f) => [f.name, f]));
    assert.equal(byName.README.worktree, 'Modified');
    assert.equal(byName['NEW.txt'].worktree, 'Untracked');

    await g.git.add('/tmp/work', ['README', 'NEW.txt']);
    st = await g.git.status('/tmp/work');
    assert.equal(st.fileStatus.find((f) => f.name === 'NEW.txt').staging, 'Added');
    const { sha } = await g.git.commit('/tmp/work', 'second', 'Tester', 'tester@example.com');
    assert.match(sha, /^[0-9a-f]{40}$/);
    st = await g.git.status('/tmp/work');
    assert.deepEqual(st.fileStatus, []);
    assert.equal(st.ahead, 1);

    await g.git.createBranch('/tmp/work', 'feature');
    let br = await g.git.branches('/tmp/work');
    assert.deepEqual(br.branches.sort(), ['feature', 'main']);
    await g.git.checkoutBranch('/tmp/work', 'feature');
    br = await g.git.branches('/tmp/work');
    assert.equal(br.current, 'feature');
    await g.git.checkoutBranch('/tmp/work', 'main');

    await g.git.push('/tmp/work');
    const log = await g.process.executeCommand('git -C /tmp/origin.git log --format=%s main');
    assert.equal(log.result, 'second\nfirst\n');

    // Someone else pushes; pull brings it in.
    const other = await g.process.executeCommand('set -e; cd /tmp/seed && git pull -q && echo three > README && git -c user.name=o -c user.email=o@example.com commit -qam third && git push -q');
    assert.equal(other.exitCode, 0, other.result);
    await g.git.pull('/tmp/work');
    assert.equal((await g.fs.downloadFile('/tmp/work/README')).toString(), 'three\n');

    // Credentials are per call and leave no trace in the configuration.
    await g.git.clone('file:///tmp/origin.git', '/tmp/work2', undefined, undefined, 'someone', 's3cret');
    const cfg = await g.process.executeCommand('cat /tmp/work2/.git/config; git config --global --list 2>/dev/null; true');
    assert.doesNotMatch(cfg.result, /s3cret/);

    await assert.rejects(g.git.checkoutBranch('/tmp/work', 'no-such-branch'), /no-such-branch/);
  } finally {
    await g.delete();
  }
});

test('codeRun runs python and javascript', { timeout: 120_000 }, async () => {
  const c = await daytona.create({ image: baseImage, language: 'python', labels: { suite } });
  try {
    const py = await c.process.codeRun('print(6*7)');
    assert.equal(py.exitCode, 0);
    assert.equal(py.result.trim(), '42');
    const argv = await c.process.codeRun('import sys, os; print(sys.argv[1:], os.environ["X"])', { argv: ['a', 'b c'], env: { X: 'y' } });
    assert.equal(argv.result.trim(), "['a', 'b c'] y");
    const fail = await c.process.codeRun('raise SystemExit(4)');
    assert.equal(fail.exitCode, 4);

    await c.setLabels({ suite, 'code-toolbox-language': 'javascript' });
    const js = await daytona.get(c.id);
    const node = await js.process.codeRun('console.log(6*7)');
    assert.equal(node.result.trim(), '42');
  } finally {
    await c.delete();
  }
});

test('getSignedPreviewUrl: the proxy serves the signed URL until it expires and refuses a forged one', async () => {
  await sb.process.executeCommand('mkdir -p /tmp/www && echo signed-ok > /tmp/www/index.html && (busybox httpd -p 8081 -h /tmp/www &)');
  const signed = await sb.getSignedPreviewUrl(8081, 3);
  assert.equal(signed.sandboxId, sb.id);
  assert.equal(signed.port, 8081);
  assert.ok(signed.token);
  const url = new URL(signed.url);
  assert.ok(url.hostname.startsWith(`8081-${signed.token}.`), signed.url);
  let res;
  for (let i = 0; i < 50; i++) {
    res = await proxyGet(d.proxyPort, url.host);
    if (res.status === 200) break;
    await sleep(100);
  }
  assert.equal(res.body.trim(), 'signed-ok');
  // The port is private now: its plain preview hosts need the token
  // getPreviewLink answers, in the header the SDK documents.
  const link = await sb.getPreviewLink(8081);
  assert.ok(link.token, 'getPreviewLink of a signed port answers its token');
  const plain = new URL(link.url).host;
  assert.equal((await proxyGet(d.proxyPort, plain)).status, 403);
  const withToken = await proxyGet(d.proxyPort, plain, '/', { 'x-daytona-preview-token': link.token });
  assert.equal(withToken.status, 200);
  assert.equal(withToken.body.trim(), 'signed-ok');
  // One character of the MAC changed: refused, without reaching the sandbox.
  const last = url.hostname.split('.')[0];
  const forged = url.host.replace(last, last.slice(0, -1) + (last.endsWith('a') ? 'b' : 'a'));
  assert.equal((await proxyGet(d.proxyPort, forged)).status, 403);
  // Another port with this port's token: refused.
  assert.equal((await proxyGet(d.proxyPort, url.host.replace('8081-', '8080-'))).status, 403);
  await sleep(4500);
  assert.equal((await proxyGet(d.proxyPort, url.host)).status, 403);
});

test("the preview proxy passes a sandbox's server no credential: not the API key, the preview token or a signed URL's token", async () => {
  await sb.fs.uploadFile(Buffer.from(echoHeaders), '/tmp/echo.sh');
  await sb.process.executeCommand('chmod +x /tmp/echo.sh && (nc -ll -p 8082 -e /tmp/echo.sh </dev/null >/dev/null 2>&1 &)');
  // A signed URL makes the port private: its plain preview host then
  // needs the token getPreviewLink answers.
  const signed = await sb.getSignedPreviewUrl(8082, 60);
  const link = await sb.getPreviewLink(8082);
  assert.ok(link.token, 'getPreviewLink of a private port answers its token');
  const apiKey = { Authorization: `Bearer ${d.token}`, 'X-Api-Key': d.token, 'X-App': 'kept' };
  for (const [via, host, headers] of [
    ['the preview link', new URL(link.url).host, { ...apiKey, 'x-daytona-preview-token': link.token }],
    ['the signed URL', new URL(signed.url).host, apiKey],
  ]) {
    let res;
    for (let i = 0; i < 50; i++) {
      res = await proxyGet(d.proxyPort, host, '/', headers);
      if (res.status === 200) break;
      await sleep(100);
    }
    assert.equal(res.status, 200, `${via}: ${res.status} ${res.body}`);
    const seen = res.body.toLowerCase();
    assert.match(seen, /x-app: kept/, `${via}: the request's own headers pass`);
    for (const leak of [d.token, link.token, signed.token, 'x-daytona-preview-token', 'authorization:', 'x-api-key', 'sandpit-']) {
      assert.ok(!seen.includes(leak.toLowerCase()), `${via}: the sandbox's server saw ${leak}:\n${res.body}`);
    }
  }
});
