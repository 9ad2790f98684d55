// The desktop template's image for the SDK suites that need it
// (test/e2b/desktop.test.mjs, test/daytona/computer-use.test.mjs,
// test/mcp/desktop.test.mjs).
//
// It takes minutes to build. Under scripts/test.sh its build runs in the
// background from the start of the run, and SANDPIT_DESKTOP_BUILD names the
// directory where that build leaves its exit status ("status") and output
// ("log"): desktopImage waits for it, and fails with the build's log when it
// failed, so that no test skips for want of the image. Run on its own, it
// runs scripts/build-desktop-image.sh itself (a no-op once the image is
// built).

import { execFile } from 'node:child_process';
import { access, readFile } from 'node:fs/promises';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');

export async function desktopImage() {
  const dir = process.env.SANDPIT_DESKTOP_BUILD;
  if (!dir) {
    await run(join(repoRoot, 'scripts', 'build-desktop-image.sh'), [], { maxBuffer: 64 << 20 });
    return;
  }
  const status = join(dir, 'status');
  for (;;) {
    try {
      await access(status);
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  const code = (await readFile(status, 'utf8')).trim();
  if (code !== '0') {
    const log = await readFile(join(dir, 'log'), 'utf8').catch((e) => `(no log: ${e})`);
    throw new Error(`the desktop image build scripts/test.sh started failed (exit ${code}); its log ends:\n${log.slice(-6000)}`);
  }
}
