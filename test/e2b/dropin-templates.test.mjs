// The E2B Template SDK in the drop-in configuration (see dropin.mjs): the
// official, unmodified `e2b` SDK with E2B_DOMAIN and E2B_API_KEY only builds
// templates through https://api.<domain>, uploads its files to the link the
// API returns, follows the build's status and logs, and creates sandboxes
// from what it built, reached at https://49983-<id>.<domain>.
//
// The symlink cases are E2B's own ("build template with symlinks"): the SDK
// archives a symlink as a symlink unless resolveSymlinks is set, and E2B's
// build keeps it a symlink where the copy puts it, relative, absolute or
// dangling. A symlink never makes the build read a file of the daemon's host
// outside the uploaded files: a link to one lands in the image as a link,
// and what it points at there is the image's own file or nothing.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, mkdir, writeFile, symlink, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { Sandbox, Template, waitForTimeout, BuildError } from 'e2b'
import { dropInSuite } from './dropin.mjs'
import { runId } from './helpers.mjs'

const T = 600_000
const uniq = (p) => `${p}-${randomBytes(3).toString('hex')}`
// Sandboxes made one after another from one template must not be merged by
// the daemon's create replay: each names its own test.
const meta = (tag) => ({ metadata: { test: uniq(tag), run: runId } })

dropInSuite(import.meta.url, 'the E2B Template SDK', T, cases)

async function sh(sbx, cmd) {
  const r = await sbx.commands.run(cmd, { user: 'root' })
  return r.stdout.trim()
}

// withSandbox creates a sandbox from the template name, runs fn with it and
// kills it.
async function withSandbox(name, tag, fn) {
  const sbx = await Sandbox.create(name, meta(tag))
  try {
    assert.equal(sbx.sandboxDomain, process.env.E2B_DOMAIN)
    await fn(sbx)
  } finally {
    await sbx.kill()
  }
}

function cases() {
  let ctx
  let outside
  const secret = `host-secret-${randomBytes(6).toString('hex')}`

  before(async () => {
    ctx = await mkdtemp(join(tmpdir(), 'sandpit-dropin-tpl-'))
    // E2B's own fixture: a file, a relative and an absolute symlink to it,
    // and a symlink to nothing.
    const folder = join(ctx, 'folder')
    await mkdir(folder)
    await writeFile(join(folder, 'test.txt'), 'This is a test file.')
    await symlink('test.txt', join(folder, 'symlink.txt'))
    await symlink(join(folder, 'test.txt'), join(folder, 'symlink2.txt'))
    await symlink('12345test.txt', join(folder, 'symlink3.txt'))
    // A file of the daemon's host outside the context, and links to it.
    outside = await mkdtemp(join(tmpdir(), 'sandpit-dropin-outside-'))
    await writeFile(join(outside, 'secret.txt'), secret)
    await mkdir(join(ctx, 'evil'))
    await symlink(join(outside, 'secret.txt'), join(ctx, 'evil', 'abs'))
    await symlink(`../../${outside.split('/').pop()}/secret.txt`, join(ctx, 'evil', 'rel'))
    await symlink(outside, join(ctx, 'evil', 'dir'))
    await writeFile(join(ctx, 'evil', 'plain.txt'), 'plain')
  })

  after(async () => {
    if (ctx) await rm(ctx, { recursive: true, force: true })
    if (outside) await rm(outside, { recursive: true, force: true })
  })

  test('the SDK builds through https://api.<domain>, not a debug URL: copy, setEnvs, runCmd, setUser, setWorkdir, setStartCmd, build logs', async () => {
    assert.ok(process.env.E2B_DOMAIN && !process.env.E2B_API_URL && !process.env.E2B_SANDBOX_URL)
    const name = uniq('build')
    const tpl = Template({ fileContextPath: ctx })
      .fromBaseImage()
      .copy('folder/*.txt', 'folder', { forceUpload: true })
      .setEnvs({ ENV_1: 'value1', ENV_2: 'value2' })
      .runCmd('cat folder/test.txt')
      .setUser('user')
      .copy('folder/test.txt', '/home/user/owned.txt')
      .setUser('root')
      .setWorkdir('/app')
      .setStartCmd('echo started > /tmp/started && exec sleep 3600', waitForTimeout(1000))
    const logs = []
    const info = await Template.build(tpl, `${name}:v1`, { onBuildLogs: (e) => logs.push(e.message) })
    assert.equal(info.name, `${name}:v1`)
    assert.ok(logs.some((l) => /Step \d+\/\d+ : COPY/.test(l)), logs.join('\n'))
    assert.ok(logs.some((l) => l.includes('This is a test file.')), `the runCmd's output reached onBuildLogs:\n${logs.join('\n')}`)
    assert.equal(await Template.exists(name), true)
    assert.equal(await Template.exists(uniq('missing')), false)
    assert.deepEqual((await Template.getTags(name)).map((t) => t.tag), ['v1'])
    await withSandbox(`${name}:v1`, 'build', async (sbx) => {
      assert.equal(await sh(sbx, 'cat /folder/test.txt'), 'This is a test file.')
      assert.equal(await sh(sbx, 'echo $ENV_1 $ENV_2'), 'value1 value2')
      // As on E2B, a copy belongs to the user the build runs as.
      assert.equal(await sh(sbx, 'stat -c %U /home/user/owned.txt /folder/test.txt'), 'user\nroot')
      assert.equal(await sh(sbx, 'test -d /app && echo yes'), 'yes')
      assert.equal(await sh(sbx, 'cat /tmp/started'), 'started')
    })
  })

  test('buildInBackground, then getBuildStatus follows the build to ready with its logs', async () => {
    const name = uniq('background')
    const tpl = Template().fromTemplate('base').runCmd(`echo ${name} > /built`)
    const build = await Template.buildInBackground(tpl, name)
    let status
    const logs = []
    let offset = 0
    for (;;) {
      status = await Template.getBuildStatus(build, { logsOffset: offset })
      logs.push(...status.logEntries.map((e) => e.message))
      offset += status.logEntries.length
      if (status.status !== 'building' && status.status !== 'waiting') break
      await new Promise((r) => setTimeout(r, 500))
    }
    assert.equal(status.status, 'ready', JSON.stringify(status))
    assert.ok(logs.some((l) => l.includes(`echo ${name}`)), logs.join('\n'))
    await withSandbox(name, 'background', async (sbx) => {
      assert.equal(await sh(sbx, 'cat /built'), name)
    })
  })

  test('build template with symlinks: a wildcard copy keeps relative, absolute and dangling symlinks as symlinks', async () => {
    const name = uniq('symlinks')
    const tpl = Template({ fileContextPath: ctx })
      .fromBaseImage()
      .skipCache()
      .copy('folder/*', 'folder', { forceUpload: true })
      .runCmd('cat folder/symlink.txt')
    await Template.build(tpl, name)
    await withSandbox(name, 'symlinks', async (sbx) => {
      assert.equal(await sh(sbx, 'cat /folder/test.txt'), 'This is a test file.')
      assert.equal(await sh(sbx, 'readlink /folder/symlink.txt'), 'test.txt')
      assert.equal(await sh(sbx, 'cat /folder/symlink.txt'), 'This is a test file.')
      assert.equal(await sh(sbx, 'readlink /folder/symlink2.txt'), join(ctx, 'folder', 'test.txt'))
      assert.equal(await sh(sbx, 'readlink /folder/symlink3.txt'), '12345test.txt')
    })
  })

  test('a copy of one symlink keeps the link at the destination; resolveSymlinks copies its target', async () => {
    const name = uniq('onelink')
    const tpl = Template({ fileContextPath: ctx })
      .fromBaseImage()
      .copy('folder/symlink.txt', '/kept/link.txt')
      .copy('folder/symlink.txt', '/resolved/symlink.txt', { resolveSymlinks: true })
      .runCmd('cat /resolved/symlink.txt')
    await Template.build(tpl, name)
    await withSandbox(name, 'onelink', async (sbx) => {
      assert.equal(await sh(sbx, 'readlink /kept/link.txt'), 'test.txt')
      assert.equal(await sh(sbx, 'test -L /resolved/symlink.txt && echo link || echo file'), 'file')
      assert.equal(await sh(sbx, 'cat /resolved/symlink.txt'), 'This is a test file.')
    })
  })

  test('a symlink to a file of the daemon\'s host outside the context never brings that file into the build', async () => {
    const name = uniq('outside')
    const logs = []
    const tpl = Template({ fileContextPath: ctx })
      .fromBaseImage()
      .copy('evil', '/evil')
      .copy('evil/*', '/star')
      .copy('evil/abs', '/one-abs')
      .copy('evil/rel', '/one-rel')
      // A symlink to a directory: the SDK archives the link and, beneath
      // it, the files it reaches through it (read on the caller's machine,
      // as E2B's SDK does); the build keeps the link alone.
      .copy('evil/dir', '/one-dir')
      .runCmd('cat /evil/* /evil/dir/secret.txt /star/* /star/dir/secret.txt /one-abs /one-rel /one-dir/secret.txt 2>&1; ls -laR /evil /star /one-abs /one-rel /one-dir 2>&1; true')
    await Template.build(tpl, name, { onBuildLogs: (e) => logs.push(e.message) })
    assert.ok(!logs.some((l) => l.includes(secret)), `the host's file reached the build:\n${logs.join('\n')}`)
    await withSandbox(name, 'outside', async (sbx) => {
      assert.equal(await sh(sbx, 'cat /evil/plain.txt /star/plain.txt'), 'plainplain')
      for (const p of ['/evil/abs', '/star/abs', '/one-abs']) assert.equal(await sh(sbx, `readlink ${p}`), join(outside, 'secret.txt'))
      for (const p of ['/evil/rel', '/star/rel', '/one-rel']) assert.equal(await sh(sbx, `readlink ${p}`), `../../${outside.split('/').pop()}/secret.txt`)
      for (const p of ['/evil/dir', '/star/dir', '/one-dir']) assert.equal(await sh(sbx, `readlink ${p}`), outside)
      const read = await sh(sbx, 'cat /evil/* /evil/dir/secret.txt /star/* /star/dir/secret.txt /one-abs /one-rel /one-dir/secret.txt 2>/dev/null; true')
      assert.ok(!read.includes(secret), `the host's file is in the sandbox: ${read}`)
    })
  })

  test('fromTemplate of a template the caller built; a runCmd as a missing user fails with E2B\'s message', async () => {
    const parent = uniq('parent')
    await Template.build(Template({ fileContextPath: ctx }).fromTemplate('base').copy('folder/test.txt', '/p/test.txt'), parent)
    const child = uniq('child')
    await Template.build(Template().fromTemplate(parent).runCmd('cat /p/test.txt > /p/child.txt'), child)
    await withSandbox(child, 'child', async (sbx) => {
      assert.equal(await sh(sbx, 'cat /p/child.txt'), 'This is a test file.')
    })
    const bad = Template().fromBaseImage().runCmd('whoami', { user: 'root123' })
    await assert.rejects(Template.build(bad, uniq('baduser')), (err) => {
      assert.ok(err instanceof BuildError, `${err}`)
      assert.equal(err.message, "failed to run command 'whoami': user 'root123' does not exist")
      return true
    })
  })
}
