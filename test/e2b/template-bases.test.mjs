// Template builds are untrusted code: through the official e2b SDK's
// Template API, a tenant (a personal access token of a non-admin owner)
// may not build on an image the operator keeps for itself, by name or by
// ID prefix, nor on another owner's template; the error reads the same for
// an image that exists and one that does not, and the image's secret never
// reaches the build's logs. The images the daemon builds carry this run's
// label and are removed at the end, with the private tag this file adds.

import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtemp, writeFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { randomBytes } from 'node:crypto'
import { Template } from 'e2b'
import { setup, teardown, startDaemon, runId, testImage, adminCall } from './helpers.mjs'

const run = promisify(execFile)
const T = 180_000
const secret = 'operator-private-data'
const privateTag = `sandpit-e2b-private/secret:${runId}`

let d
let privateID

const admin = (method, path, body) => adminCall(d, method, path, body)

async function tokenFor(name, owner) {
  const t = await admin('POST', '/v1/tokens', { name, owner })
  return { ...d.opts, apiKey: t.token }
}

before(async () => {
  await setup()
  d = await startDaemon({ name: 'template-bases' })
  const dir = await mkdtemp(join(tmpdir(), 'sandpit-e2b-private-'))
  try {
    await writeFile(join(dir, 'Dockerfile'), `FROM ${testImage}\nRUN echo ${secret} > /secret\nLABEL sandpit.run=${runId}\n`)
    await run('docker', ['build', '-q', '-t', privateTag, dir], { env: { ...process.env, DOCKER_BUILDKIT: '0' } })
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
  const { stdout } = await run('docker', ['image', 'inspect', '--format', '{{.Id}}', privateTag])
  privateID = stdout.trim().replace(/^sha256:/, '')
})

after(async () => {
  await teardown()
  const { stdout } = await run('docker', ['images', '-q', '--no-trunc', '--filter', `label=sandpit.run=${runId}`])
  const ids = [...new Set(stdout.split('\n').filter(Boolean))]
  if (ids.length > 0) await run('docker', ['rmi', '-f', ...ids]).catch(() => {})
  await run('docker', ['rmi', '-f', privateTag]).catch(() => {})
})

// refusal builds a template from base as opts' owner and returns the
// error's message with base replaced, so two refusals can be compared.
async function refusal(opts, base, logs) {
  const tpl = Template().fromImage(base).runCmd('cat /secret')
  const name = `bases-${randomBytes(3).toString('hex')}`
  let message
  await assert.rejects(Template.build(tpl, name, { ...opts, onBuildLogs: (e) => logs.push(e.message) }), (err) => {
    message = String(err.message)
    return true
  })
  return message.split(base).join('IMAGE')
}

describe('template bases', () => {
  test('a tenant cannot build on a private image, an ID prefix or another owner\'s template, and cannot tell which exist', async () => {
    const bob = await tokenFor(`bob-${runId}`, 'bob')
    const alice = await tokenFor(`alice-${runId}`, 'alice')
    const logs = []
    for (const [real, fake] of [
      [privateTag, 'sandpit-e2b-private/none:x'],
      [privateID.slice(0, 4), '0f0f'],
      [privateID.slice(0, 12), '0f0f0f0f0f0f'],
    ]) {
      const a = await refusal(bob, real, logs)
      const b = await refusal(bob, fake, logs)
      assert.match(a, /may not read the image/)
      assert.equal(a, b, `the refusal tells ${real} from ${fake}`)
    }
    // Alice's own template, which Bob may not build on.
    const aliceName = `alice-${randomBytes(3).toString('hex')}`
    await Template.build(Template().fromImage(testImage).runCmd("echo alice-own-data > /alice"), aliceName, alice)
    const tpls = await admin('GET', '/v1/templates')
    const aliceImage = tpls.templates.find((t) => t.name === aliceName)?.image
    assert.ok(aliceImage, JSON.stringify(tpls))
    const c = await refusal(bob, aliceImage, logs)
    assert.match(c, /may not read the image/)
    assert.ok(!logs.some((l) => l.includes(secret)), `the secret reached a build log:\n${logs.join('\n')}`)
    assert.ok(!d.log.includes(secret), 'the secret reached the daemon log')
  })
})
