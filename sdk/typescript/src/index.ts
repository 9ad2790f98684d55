/**
 * @sandpit/sdk: the TypeScript SDK of Sandpit's native API.
 *
 * ```ts
 * import { Sandpit } from '@sandpit/sdk'
 * const sandpit = new Sandpit() // SANDPIT_ADDR, SANDPIT_TOKEN
 * const sandbox = await sandpit.create({ name: 'demo' })
 * const { publicUrl } = await sandbox.exposePort(8080)
 * ```
 */
export { Sandpit, SandboxList, type SandpitOptions, type CreateOptions, type ListOptions } from './sandpit.js';
export {
  Sandbox,
  Files,
  type ExecOptions,
  type ExecResult,
  type CodeError,
  type CodeResult,
  type Execution,
  type RunCodeOptions,
  type ExposeOptions,
  type FileEntry,
  type FileKind,
} from './sandbox.js';
export type { EventsOptions, SandpitEvent } from './events.js';
export {
  Snapshots,
  Templates,
  TemplateBuildError,
  type BuildOptions,
  type BuildLogEntry,
  type BuildState,
  type Template,
  type TemplateBuild,
} from './templates.js';
export type { MutationOptions, RetryOptions } from './http.js';
export type { CustomDomain, ExposedPort, PortProtocol, SandboxInfo, SandboxState } from './types.js';
export {
  SandpitError,
  NameConflictError,
  HostnameConflictError,
  SandboxPausedError,
  SandboxStoppedError,
  PortPoolExhaustedError,
  IdempotencyKeyMismatchError,
  NotFoundError,
  AuthError,
  TimeoutError,
  NetworkError,
} from './errors.js';
