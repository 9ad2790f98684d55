// Daytona's codeRun on a sandbox made from the code-interpreter image runs on
// its Jupyter kernel, the one E2B's runCode uses: state persists between
// calls, a matplotlib figure comes back as a chart artifact the way the
// official SDK reports charts, and an exception is exit code 1 with its
// traceback. Skipped where the image was not built (CI builds it and fails
// without it, see scripts/test.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { ChartType } from '@daytonaio/sdk';
import { openSuite, closeSuite } from './daemon.mjs';

const image = 'sandpit/code-interpreter:latest';
const suite = 'coderun-chart-' + randomBytes(4).toString('hex');

function haveImage() {
  try {
    execFileSync('docker', ['image', 'inspect', image], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const missing = !haveImage();
if (missing && process.env.CI) {
  throw new Error(`${image} is missing: scripts/build-code-interpreter-image.sh builds it`);
}

let d;
let daytona;
let sb;

before(async () => {
  if (missing) return;
  ({ d, daytona } = await openSuite());
  sb = await daytona.create({ image, language: 'python', labels: { suite } }, { timeout: 180 });
});

after(() => closeSuite({ d, daytona, sb }));

test('codeRun on the kernel: state kept, a line chart artifact with its PNG, an exception', { skip: missing && `${image} not built`, timeout: 180_000 }, async () => {
  const first = await sb.process.codeRun('x = 6\nprint(x * 7)');
  assert.equal(first.exitCode, 0);
  assert.equal(first.result.trim(), '42');
  assert.deepEqual(first.artifacts.charts, []);
  // The kernel keeps x: a script would raise NameError here.
  const again = await sb.process.codeRun('print(x + 1)');
  assert.equal(again.result.trim(), '7');

  const plot = await sb.process.codeRun([
    'import matplotlib.pyplot as plt',
    'plt.plot([1, 2, 3], [2, 4, 8], label="growth")',
    'plt.title("doubling")',
    'plt.xlabel("step")',
    'plt.show()',
    'print("drawn")',
  ].join('\n'));
  assert.equal(plot.exitCode, 0, plot.result);
  assert.match(plot.result, /drawn/);
  assert.equal(plot.artifacts.charts.length, 1, JSON.stringify(plot.artifacts));
  const chart = plot.artifacts.charts[0];
  assert.equal(chart.type, ChartType.LINE);
  assert.equal(chart.title, 'doubling');
  const png = Buffer.from(chart.png, 'base64');
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

  const fail = await sb.process.codeRun('1 / 0');
  assert.equal(fail.exitCode, 1);
  assert.match(fail.result, /ZeroDivisionError/);
  // The context survives the exception.
  const after = await sb.process.codeRun('print(x)');
  assert.equal(after.result.trim(), '6');
});
