// sandbox.resize through the official SDK on a real daemon and Docker, with
// Daytona's rules: a started sandbox's cpu and memory may only grow (at
// once, in the engine), a stopped one's may change either way, and the disk
// keeps its size. A repeated resize changes nothing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { openSuite, closeSuite } from './daemon.mjs';

let d;
let daytona;
let sb;
const suite = 'resize-' + randomBytes(4).toString('hex');

before(async () => {
  ({ d, daytona } = await openSuite());
  sb = await daytona.create({ labels: { suite }, resources: { cpu: 1, memory: 1 } });
});

after(() => closeSuite({ d, daytona, sb }));

// engineLimits is what Docker holds for the sandbox's container.
function engineLimits(id) {
  const out = execFileSync('docker', ['inspect', '--format', '{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}', `sandpit-${id}`], { encoding: 'utf8' });
  const [nano, mem] = out.trim().split(' ').map(Number);
  return { cpu: nano / 1e9, memoryMiB: mem / (1 << 20) };
}

test('resize grows a started sandbox at once, shrinks a stopped one, and refuses the rest', { timeout: 180_000 }, async () => {
  assert.equal(sb.cpu, 1);
  assert.equal(sb.memory, 1);

  // The same resize twice: the second is a retry and changes nothing.
  await sb.resize({ cpu: 2, memory: 1.5 });
  await sb.resize({ cpu: 2, memory: 1.5 });
  assert.equal(sb.cpu, 2);
  assert.equal(sb.memory, 1.5);
  assert.equal(sb.state, 'started');
  assert.deepEqual(engineLimits(sb.id), { cpu: 2, memoryMiB: 1536 });
  const inside = await sb.process.executeCommand('cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes');
  assert.equal(inside.result.trim(), String(1536 * 1024 * 1024));
  await sb.refreshData();
  assert.equal(sb.memory, 1.5);

  const refused = [
    [{ memory: 1 }, /only grow/],
    [{ cpu: 1 }, /only grow/],
    [{ disk: 1000 }, /disk cannot be resized/],
    [{}, /give cpu, memory or disk/],
    [{ memory: -1 }, /memory must be a positive/],
  ];
  for (const [resources, message] of refused) {
    await assert.rejects(sb.resize(resources), (err) => {
      assert.equal(err.statusCode, 400, `${JSON.stringify(resources)}: ${err.message}`);
      assert.match(err.message, message);
      return true;
    });
  }
  assert.deepEqual(engineLimits(sb.id), { cpu: 2, memoryMiB: 1536 });

  await sb.stop();
  await sb.resize({ cpu: 1, memory: 0.5 });
  assert.equal(sb.state, 'stopped');
  await sb.start();
  assert.equal(sb.cpu, 1);
  assert.equal(sb.memory, 0.5);
  assert.deepEqual(engineLimits(sb.id), { cpu: 1, memoryMiB: 512 });
  assert.equal((await sb.process.executeCommand('echo still-here')).result.trim(), 'still-here');
});
