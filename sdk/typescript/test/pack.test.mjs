// `npm pack` makes a package that a fresh project installs from the tarball
// and uses from plain ESM and from TypeScript; installing the folder, as the
// README says, builds the package, and the README's example then runs as
// written against a real daemon on the default image.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile, readdir, readFile, cp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

import { setup, teardown, startDaemon, freeRange } from './helpers.mjs'

const run = promisify(execFile)
const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..')

const sample = `import { Sandpit, NotFoundError, type ExposedPort, type ExecResult } from '@sandpit/sdk'

async function demo(): Promise<boolean> {
  const sandpit = new Sandpit({ apiUrl: 'http://127.0.0.1:7420', token: 't', retry: { maxAttempts: 3 } })
  const sandbox = await sandpit.create({ name: 'demo', labels: { job: 'ci' }, memoryMB: 512 })
  const first: ExposedPort = await sandbox.exposePort(8080)
  const retry = await sandbox.exposePort(8080, { protocol: 'http', idempotencyKey: 'k' })
  const res: ExecResult = await sandbox.exec('ls', { onStdout: (c: string) => process.stdout.write(c), timeoutMs: 1000 })
  const bytes: Uint8Array = await sandbox.files.read('/etc/hosts', { format: 'bytes' })
  const text: string = await sandbox.files.read('/etc/hosts')
  for await (const sb of sandpit.list({ labels: { job: 'ci' } })) sb.id.toUpperCase()
  for await (const ev of sandpit.events()) ev.type.toUpperCase()
  try {
    await sandpit.get('nope')
  } catch (err) {
    if (err instanceof NotFoundError) err.code.toUpperCase()
  }
  return first.publicUrl === retry.publicUrl && res.exitCode === 0 && bytes.length === text.length
}
void demo
`

test('npm pack: a fresh project installs the tarball and imports it from ESM and TypeScript', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'sandpit-sdk-pack-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const npmOpts = { cwd: dir, maxBuffer: 16 << 20, env: { ...process.env, npm_config_audit: 'false', npm_config_fund: 'false' } }

  // dist/ is what the suite tests; building it again here would only cost
  // time, so the prepack build is skipped.
  await run('npm', ['pack', '--silent', '--ignore-scripts', '--pack-destination', dir], { cwd: pkgDir, maxBuffer: 16 << 20 })
  const tarball = (await readdir(dir)).find((f) => f.endsWith('.tgz'))
  assert.ok(tarball, 'npm pack wrote a tarball')
  const { stdout: listing } = await run('tar', ['-tzf', join(dir, tarball)])
  assert.ok(listing.includes('package/dist/index.js'))
  assert.ok(listing.includes('package/dist/index.d.ts'))
  assert.ok(!listing.includes('package/test/'), 'tests stay out of the package')

  const project = join(dir, 'project')
  await run('mkdir', [project])
  await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }))
  // Dependencies come from the npm cache the SDK's own install filled,
  // @types/node in the version the SDK builds with.
  const typesNode = JSON.parse(await readFile(join(pkgDir, 'node_modules', '@types', 'node', 'package.json'), 'utf8')).version
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', join(dir, tarball), `@types/node@${typesNode}`], { ...npmOpts, cwd: project })

  await writeFile(join(project, 'esm.mjs'), `import { Sandpit, PortPoolExhaustedError, SandpitError } from '@sandpit/sdk'
const s = new Sandpit({ apiUrl: '127.0.0.1:1', token: 't' })
if (s.apiUrl !== 'http://127.0.0.1:1') throw new Error('apiUrl ' + s.apiUrl)
if (!(new PortPoolExhaustedError('m', { status: 503, code: 'port_pool_exhausted' }) instanceof SandpitError)) throw new Error('hierarchy')
console.log('ok')
`)
  const { stdout } = await run(process.execPath, ['esm.mjs'], { cwd: project })
  assert.equal(stdout.trim(), 'ok')

  await writeFile(join(project, 'sample.ts'), sample)
  await writeFile(join(project, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { strict: true, noEmit: true, target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', types: ['node'] },
    files: ['sample.ts'],
  }))
  const tsc = join(pkgDir, 'node_modules', 'typescript', 'bin', 'tsc')
  await run(process.execPath, [tsc, '--noEmit', '-p', 'tsconfig.json'], { cwd: project }).catch((err) => {
    assert.fail(`tsc --noEmit failed:\n${err.stdout}${err.stderr}`)
  })
})

// readmeExample is the README's example: the first js block after its
// "## The example" heading, run as the file the README tells users to save.
async function readmeExample() {
  const readme = await readFile(join(pkgDir, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf('## The example'))
  const m = section.match(/```js\n([\s\S]*?)```/)
  assert.ok(m, 'README.md has a js block under "## The example"')
  return m[1]
}

test('npm install of the folder builds the package; the README example runs as written on the default image', { timeout: 600_000 }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'sandpit-sdk-folder-'))
  await setup()
  t.after(async () => {
    await teardown()
    await rm(dir, { recursive: true, force: true })
  })
  // A checkout as a user has it: no node_modules, no dist.
  const copy = join(dir, 'sdk')
  await cp(pkgDir, copy, { recursive: true, filter: (src) => !/[/\\](node_modules|dist)$/.test(src) })
  const project = join(dir, 'project')
  await run('mkdir', [project])
  await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'folder-consumer', private: true }))
  const npmEnv = { ...process.env, npm_config_audit: 'false', npm_config_fund: 'false' }
  await run('npm', ['install', '--prefer-offline', copy], { cwd: project, env: npmEnv, maxBuffer: 16 << 20 }).catch((err) => {
    assert.fail(`npm install ${copy} failed:\n${err.stdout}${err.stderr}`)
  })
  await writeFile(join(project, 'quickstart.mjs'), await readmeExample())

  const d = await startDaemon({ name: 'readme', args: ['--default-image', 'sandpit/base:latest', '--port-range', await freeRange(2)] })
  const env = { ...process.env, SANDPIT_ADDR: `127.0.0.1:${d.apiPort}`, SANDPIT_TOKEN: d.token }
  const { stdout } = await run(process.execPath, ['quickstart.mjs'], { cwd: project, env }).catch((err) => {
    assert.fail(`node quickstart.mjs failed:\n${err.stdout}${err.stderr}`)
  })
  assert.deepEqual(stdout.trim().split('\n'), ['true false true', '42'])
})
