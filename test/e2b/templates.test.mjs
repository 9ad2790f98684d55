// The E2B Template API through the official e2b SDK: Template.build from the
// daemon's base image with copy (symlinks included), runCmd, setWorkdir and
// setStartCmd; a sandbox created from the built template has the files and
// runs the start command; Template.exists; two identical builds at once make
// one engine build; a runCmd as a missing user fails with E2B's message;
// fromTemplate('base') and a wildcard copy place files where E2B does.
// The images the daemon builds carry this run's label and are removed at
// the end, with the one local tag the fromImage test adds.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtemp, mkdir, writeFile, symlink, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { randomBytes } from 'node:crypto'
import { Sandbox, Template, waitForTimeout, BuildError } from 'e2b'
import { setup, teardown, startDaemon, runId, testImage } from './helpers.mjs'

const run = promisify(execFile)
const T = 180_000

let d
let ctxDir
// localTag is a name the fromImage test builds from: the test image, tagged
// under a name of this run's own, so no other test's image is touched.
const localTag = `sandpit-e2b-test/base:${runId}`
const uniq = (p) => `${p}-${randomBytes(3).toString('hex')}`

before(async () => {
  await setup()
  d = await startDaemon({ name: 'templates' })
  ctxDir = await mkdtemp(join(tmpdir(), 'sandpit-e2b-tpl-'))
  await mkdir(join(ctxDir, 'app', 'sub'), { recursive: true })
  await writeFile(join(ctxDir, 'app', 'hello.txt'), 'hello\n')
  await writeFile(join(ctxDir, 'app', 'sub', 'b.txt'), 'bee\n')
  await symlink('hello.txt', join(ctxDir, 'app', 'rel'))
  await symlink('/etc/passwd', join(ctxDir, 'app', 'abs'))
  await run('docker', ['tag', testImage, localTag])
})

after(async () => {
  await teardown()
  const { stdout } = await run('docker', ['images', '-q', '--no-trunc', '--filter', `label=sandpit.run=${runId}`])
  const ids = [...new Set(stdout.split('\n').filter(Boolean))]
  if (ids.length > 0) await run('docker', ['rmi', '-f', ...ids]).catch(() => {})
  await run('docker', ['rmi', localTag]).catch(() => {})
  if (ctxDir) await rm(ctxDir, { recursive: true, force: true })
})

async function sh(sbx, cmd) {
  const r = await sbx.commands.run(cmd, { user: 'root' })
  return r.stdout.trim()
}

describe('templates', () => {
  test('build from the base image with copy, runCmd, setWorkdir, setStartCmd; create from it', async () => {
    const name = uniq('app')
    const tpl = Template({ fileContextPath: ctxDir })
      .fromBaseImage()
      .copy('app', '/opt/app')
      .runCmd('echo built > /opt/built.txt')
      .runCmd('id -un > /tmp/who.txt', { user: 'user' })
      .runCmd('touch /opt/after-user')
      .setWorkdir('/opt/app')
      .setStartCmd('echo started > /tmp/started && exec sleep 3600', waitForTimeout(1000))
    const logs = []
    const info = await Template.build(tpl, `${name}:v1`, { ...d.opts, onBuildLogs: (e) => logs.push(e.message) })
    assert.equal(info.name, `${name}:v1`)
    assert.match(info.templateId, /^tpl/)
    assert.ok(logs.some((l) => /Step \d+\/\d+ : COPY/.test(l)), `the engine's log reached onBuildLogs:\n${logs.join('\n')}`)

    assert.equal(await Template.exists(name, d.opts), true)
    assert.equal(await Template.exists(uniq('missing'), d.opts), false)

    for (const ref of [name, `${name}:v1`]) {
      const sbx = await Sandbox.create(ref, d.opts)
      try {
        assert.equal(await sh(sbx, 'cat /opt/app/hello.txt /opt/app/sub/b.txt'), 'hello\nbee')
        // Symlinks are copied as symlinks, relative and absolute alike.
        assert.equal(await sh(sbx, 'readlink /opt/app/rel'), 'hello.txt')
        assert.equal(await sh(sbx, 'cat /opt/app/rel'), 'hello')
        assert.equal(await sh(sbx, 'readlink /opt/app/abs'), '/etc/passwd')
        assert.equal(await sh(sbx, 'cat /opt/built.txt'), 'built')
        assert.equal(await sh(sbx, 'cat /tmp/who.txt'), 'user')
        assert.equal(await sh(sbx, 'test -f /opt/after-user && echo yes'), 'yes')
        // The start command ran when the sandbox was created, and its
        // process lives on.
        assert.equal(await sh(sbx, 'cat /tmp/started'), 'started')
        assert.match(await sh(sbx, 'ps -o args | grep -v grep | grep "sleep 3600" || true'), /sleep 3600/)
      } finally {
        await sbx.kill()
      }
    }
    await assert.rejects(Sandbox.create(`${name}:nosuchtag`, d.opts), /nosuchtag/)

    // A template built from this one has its files and its own step.
    const child = uniq('child')
    await Template.build(Template().fromTemplate(`${name}:v1`).runCmd('echo child > /opt/child.txt'), child, d.opts)
    const sbx = await Sandbox.create(child, d.opts)
    try {
      assert.equal(await sh(sbx, 'cat /opt/app/hello.txt /opt/child.txt'), 'hello\nchild')
    } finally {
      await sbx.kill()
    }
  })

  test('two identical Template.build calls at once make one engine build and the same template', async () => {
    const name = uniq('dup')
    const mk = () => Template({ fileContextPath: ctxDir })
      .fromImage(localTag)
      .copy('app/sub', '/srv/sub')
      .runCmd(`echo ${name} > /srv/id`)
    const [a, b] = await Promise.all([Template.build(mk(), name, d.opts), Template.build(mk(), name, d.opts)])
    assert.equal(a.templateId, b.templateId)
    const ended = d.log.split('\n').filter((l) => l.includes('template build ended') && l.includes(a.templateId))
    assert.equal(ended.length, 1, `one engine build:\n${ended.join('\n')}`)
    const sbx = await Sandbox.create(name, d.opts)
    try {
      assert.equal(await sh(sbx, 'cat /srv/id /srv/sub/b.txt'), `${name}\nbee`)
    } finally {
      await sbx.kill()
    }
  })

  test('two builds of one content under two tags at once: one engine build, both tags', async (t) => {
    const name = uniq('tags')
    const mk = () => Template({ fileContextPath: ctxDir })
      .fromImage(localTag)
      .runCmd(`sleep 2; echo ${name} > /srv-id`)
    const logs = [[], []]
    const [a, b] = await Promise.all([1, 2].map((v, i) =>
      Template.build(mk(), `${name}:v${v}`, { ...d.opts, onBuildLogs: (e) => logs[i].push(e.message) })))
    assert.equal(a.templateId, b.templateId)
    assert.notEqual(a.buildId, b.buildId)
    // A build that did not join the other's either replayed its finished
    // image: no engine build of its own.
    const ended = d.log.split('\n').filter((l) => l.includes('template build ended') && l.includes(a.templateId)).length
    const replays = logs.filter((l) => l.some((m) => m.includes('reusing its image'))).length
    assert.equal(ended - replays, 1, `one engine build (${ended} ended, ${replays} replayed)`)
    t.diagnostic(d.log.includes('joined a running build') ? 'the second build joined the first' : 'the second build replayed the first')
    const tags = (await Template.getTags(name, d.opts)).map((t) => t.tag).sort()
    assert.deepEqual(tags, ['v1', 'v2'])
    for (const ref of [`${name}:v1`, `${name}:v2`]) {
      const sbx = await Sandbox.create(ref, d.opts)
      try {
        assert.equal(await sh(sbx, 'cat /srv-id'), name)
      } finally {
        await sbx.kill()
      }
    }
  })

  test("fromTemplate('base'), and a wildcard copy lands in its destination directory, relative to the workdir", async () => {
    const name = uniq('glob')
    // One match of the wildcard: the engine alone would make it the file
    // "folder"; E2B makes folder/hello.txt.
    const tpl = Template({ fileContextPath: ctxDir })
      .fromTemplate('base')
      .setWorkdir('/srv/work')
      .copy('app/*.txt', 'folder')
      .runCmd('cat folder/hello.txt > /tmp/copied.txt')
    await Template.build(tpl, name, d.opts)
    const sbx = await Sandbox.create(name, d.opts)
    try {
      assert.equal(await sh(sbx, 'cat /srv/work/folder/hello.txt'), 'hello')
      assert.equal(await sh(sbx, 'cat /tmp/copied.txt'), 'hello')
    } finally {
      await sbx.kill()
    }
  })

  test('a runCmd as a user that does not exist fails the build with E2B\'s message', async () => {
    const tpl = Template().fromBaseImage().runCmd('true').runCmd('whoami', { user: 'nosuch' })
    await assert.rejects(Template.build(tpl, uniq('baduser'), d.opts), (err) => {
      assert.ok(err instanceof BuildError, `${err}`)
      assert.equal(err.message, "failed to run command 'whoami': user 'nosuch' does not exist")
      return true
    })
  })

  test('a retried build request gets the same build; upload URLs are checked', async () => {
    const api = (method, path, body, headers = {}) => fetch(`${d.apiUrl}${path}`, {
      method,
      headers: { 'X-API-KEY': d.token, 'Content-Type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    const body = { name: uniq('retry'), cpuCount: 1 }
    const r1 = await (await api('POST', '/v3/templates', body)).json()
    const r2 = await (await api('POST', '/v3/templates', body)).json()
    assert.equal(r2.buildID, r1.buildID)
    assert.equal(r2.templateID, r1.templateID)
    assert.deepEqual(r1.tags, ['default'])

    const hash = 'a'.repeat(64)
    const link = await (await api('GET', `/templates/${r1.templateID}/files/${hash}`)).json()
    assert.equal(link.present, false)
    assert.ok(link.url.startsWith(`${d.apiUrl}/templates/`), link.url)
    // The URL is bound to its hash: another hash in it is refused.
    const forged = link.url.replace(hash, 'b'.repeat(64))
    assert.equal((await fetch(forged, { method: 'PUT', body: 'x' })).status, 403)
    const unsigned = link.url.replace(/sig=[0-9a-f]+/, 'sig=00')
    assert.equal((await fetch(unsigned, { method: 'PUT', body: 'x' })).status, 403)
    // Not an archive: refused by the template core.
    assert.equal((await fetch(link.url, { method: 'PUT', body: 'not a tar' })).status, 400)
  })
})
