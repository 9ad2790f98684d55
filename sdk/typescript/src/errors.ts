/**
 * Typed errors. Every error the SDK throws for an answer of the daemon is a
 * SandpitError carrying the HTTP status and the server's stable code and
 * message; the cases a caller is expected to handle have their own class so
 * that `instanceof` is enough to tell them apart.
 */

export interface SandpitErrorInit {
  /** HTTP status of the answer; 0 when there was none (network failure). */
  status: number;
  /** The server's machine-readable code, e.g. `name_conflict`. */
  code: string;
  cause?: unknown;
}

export class SandpitError extends Error {
  readonly status: number;
  readonly code: string;

  constructor(message: string, init: SandpitErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.status = init.status;
    this.code = init.code;
  }
}

/** 409 `name_conflict`: another sandbox already has this name. */
export class NameConflictError extends SandpitError {}

/** 409 `hostname_conflict`: the custom domain is bound to another sandbox. */
export class HostnameConflictError extends SandpitError {}

/** 409 `sandbox_paused`: the call needs a running sandbox and this one is paused; resume it. */
export class SandboxPausedError extends SandpitError {}

/** 409 `sandbox_stopped`: the call needs a running sandbox and this one is stopped; start it. */
export class SandboxStoppedError extends SandpitError {}

/** 503 `port_pool_exhausted`: no host port is left for a TCP exposure. Not retried: no retry cures it. */
export class PortPoolExhaustedError extends SandpitError {}

/** 422 `idempotency_key_mismatch`: the Idempotency-Key was already used for a different request. */
export class IdempotencyKeyMismatchError extends SandpitError {}

/** 404: no such sandbox, exposure, domain or file. */
export class NotFoundError extends SandpitError {}

/** 401: the token is missing or wrong. */
export class AuthError extends SandpitError {}

/** The call (or the command it ran) exceeded its deadline. */
export class TimeoutError extends SandpitError {}

/** The daemon could not be reached, after every retry the policy allowed. */
export class NetworkError extends SandpitError {}

/**
 * errorFor builds the typed error of a non-2xx answer. The code decides
 * first; the status is the fallback for answers without a native error body
 * (the sandbox agent's file endpoint answers a missing file with a bare 404).
 */
export function errorFor(status: number, code: string, message: string): SandpitError {
  const init = { status, code };
  switch (code) {
    case 'name_conflict':
      return new NameConflictError(message, init);
    case 'hostname_conflict':
      return new HostnameConflictError(message, init);
    case 'sandbox_paused':
      return new SandboxPausedError(message, init);
    case 'sandbox_stopped':
      return new SandboxStoppedError(message, init);
    case 'port_pool_exhausted':
      return new PortPoolExhaustedError(message, init);
    case 'idempotency_key_mismatch':
      return new IdempotencyKeyMismatchError(message, init);
    case 'not_found':
      return new NotFoundError(message, init);
    case 'unauthorized':
      return new AuthError(message, init);
    case 'timeout':
      return new TimeoutError(message, init);
  }
  switch (status) {
    case 401:
      return new AuthError(message, init);
    case 404:
      return new NotFoundError(message, init);
    case 504:
      return new TimeoutError(message, init);
  }
  return new SandpitError(message, init);
}

/** codeForStatus names an answer that carried no code of its own. */
export function codeForStatus(status: number): string {
  switch (status) {
    case 400:
      return 'bad_request';
    case 401:
      return 'unauthorized';
    case 404:
      return 'not_found';
    case 409:
      return 'conflict';
    default:
      return `http_${status}`;
  }
}
