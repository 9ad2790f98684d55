import { randomUUID } from 'node:crypto';

import { NetworkError, SandpitError, codeForStatus, errorFor } from './errors.js';

/** Bounds the retries of one call. */
export interface RetryOptions {
  /** Attempts including the first; 1 turns retries off. Default 5. */
  maxAttempts?: number;
  /** First backoff ceiling; it doubles per attempt. Default 100 ms. */
  baseDelayMs?: number;
  /** Largest wait between attempts, also the cap on a server's Retry-After. Default 3000 ms. */
  maxDelayMs?: number;
}

export type RetryPolicy = Required<RetryOptions>;

export function retryPolicy(o: RetryOptions = {}): RetryPolicy {
  // A zero or negative delay would make the jitter range empty and hammer a
  // struggling daemon, which is what the backoff exists to avoid.
  return {
    maxAttempts: o.maxAttempts !== undefined && o.maxAttempts >= 1 ? Math.floor(o.maxAttempts) : 5,
    baseDelayMs: o.baseDelayMs !== undefined && o.baseDelayMs > 0 ? o.baseDelayMs : 100,
    maxDelayMs: o.maxDelayMs !== undefined && o.maxDelayMs > 0 ? o.maxDelayMs : 3000,
  };
}

/** Options every mutating call takes. */
export interface MutationOptions {
  /**
   * The Idempotency-Key of this logical call. By default the SDK generates
   * one per call and reuses it on each retry; pass your own to make a call
   * safe to repeat across processes (a job that restarts, a queue that
   * redelivers).
   */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface Request {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  path: string;
  query?: URLSearchParams;
  /** JSON-encoded when present. */
  json?: unknown;
  /** Sent as is (file contents). */
  bytes?: Uint8Array;
  /**
   * Safe to send again: reads, writes that carry an Idempotency-Key, and
   * writes idempotent by nature (a file overwrite).
   */
  retry: boolean;
  /** Send an Idempotency-Key: the caller's, or one generated for this call. */
  keyed?: boolean;
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface Response {
  status: number;
  headers: Headers;
  body: Uint8Array;
}

/** The reason an attempt failed, and whether another attempt may cure it. */
interface Failure {
  error: SandpitError;
  retryable: boolean;
  retryAfterMs?: number;
}

const retryStatuses = new Set([429, 502, 503, 504]);

/**
 * HttpClient sends the REST calls of the native API. A call is retried on
 * network errors and on 429, 502, 503 and 504 with capped exponential
 * backoff and full jitter; a mutating call carries one Idempotency-Key for
 * all its attempts, so the daemon runs it at most once however many times it
 * arrives.
 */
export class HttpClient {
  readonly baseUrl: string;
  readonly token: string;
  readonly policy: RetryPolicy;

  constructor(baseUrl: string, token: string, policy: RetryPolicy) {
    this.baseUrl = baseUrl;
    this.token = token;
    this.policy = policy;
  }

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { authorization: `Bearer ${this.token}`, 'user-agent': 'sandpit-sdk-typescript', ...extra };
  }

  async send(req: Request): Promise<Response> {
    const key = req.keyed ? (req.idempotencyKey ?? randomUUID()) : undefined;
    const attempts = req.retry ? this.policy.maxAttempts : 1;
    let last: Failure | undefined;
    for (let attempt = 0; attempt < attempts; attempt++) {
      if (attempt > 0 && last) {
        await sleep(this.backoff(attempt, last.retryAfterMs), req.signal);
      }
      const outcome = await this.once(req, key);
      if (!('error' in outcome)) return outcome;
      last = outcome;
      if (!outcome.retryable || req.signal?.aborted) break;
    }
    throw last!.error;
  }

  /** sendJSON sends the request and decodes a JSON answer. */
  async sendJSON<T>(req: Request): Promise<{ status: number; data: T }> {
    const res = await this.send(req);
    return { status: res.status, data: JSON.parse(new TextDecoder().decode(res.body)) as T };
  }

  private async once(req: Request, key: string | undefined): Promise<Response | Failure> {
    let url = this.baseUrl + req.path;
    if (req.query && [...req.query.keys()].length > 0) url += '?' + req.query.toString();
    const headers = this.headers();
    let body: string | Uint8Array | undefined;
    if (req.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(req.json);
    } else if (req.bytes !== undefined) {
      headers['content-type'] = 'application/octet-stream';
      body = req.bytes;
    }
    if (key !== undefined) headers['idempotency-key'] = key;
    let res: globalThis.Response;
    let bytes: Uint8Array;
    try {
      res = await fetch(url, { method: req.method, headers, body, signal: req.signal });
      // The body is read inside the try: a connection cut in the middle of
      // an answer is as lost as one cut before it.
      bytes = new Uint8Array(await res.arrayBuffer());
    } catch (err) {
      if (req.signal?.aborted) throw err;
      return {
        error: new NetworkError(`${req.method} ${req.path}: ${describe(err)}`, { status: 0, code: 'network', cause: err }),
        retryable: true,
      };
    }
    if (res.status < 300) return { status: res.status, headers: res.headers, body: bytes };
    const error = parseError(res.status, bytes);
    return {
      error,
      // A full port pool is a 503 that no retry will cure.
      retryable: retryStatuses.has(res.status) && error.code !== 'port_pool_exhausted',
      retryAfterMs: parseRetryAfter(res.headers.get('retry-after')),
    };
  }

  /** backoff is the server's Retry-After when it named one, else full jitter. */
  private backoff(attempt: number, retryAfterMs: number | undefined): number {
    const cap = this.policy.maxDelayMs;
    if (retryAfterMs !== undefined) return Math.min(retryAfterMs, cap);
    const ceiling = Math.min(cap, this.policy.baseDelayMs * 2 ** Math.min(attempt - 1, 30));
    return Math.random() * ceiling + 1;
  }
}

/** parseError reads the native error body, or the agent's, or neither. */
export function parseError(status: number, body: Uint8Array): SandpitError {
  const text = new TextDecoder().decode(body).trim();
  let code = '';
  let message = text || `HTTP ${status}`;
  try {
    const v = JSON.parse(text) as { error?: { code?: unknown; message?: unknown }; message?: unknown };
    if (v.error && typeof v.error.code === 'string') {
      code = v.error.code;
      if (typeof v.error.message === 'string') message = v.error.message;
    } else if (typeof v.message === 'string') {
      message = v.message;
    }
  } catch {
    // Not JSON: the text is the message.
  }
  return errorFor(status, code || codeForStatus(status), message);
}

function parseRetryAfter(h: string | null): number | undefined {
  if (!h) return undefined;
  const secs = Number(h);
  if (Number.isFinite(secs) && secs >= 0) return secs * 1000;
  const at = Date.parse(h);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    return cause instanceof Error ? `${err.message} (${cause.message})` : err.message;
  }
  return String(err);
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * ndjsonLines yields the non-empty lines of a streamed NDJSON body as they
 * arrive, a last line without its newline included.
 */
export async function* ndjsonLines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buf += value;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (line) yield line;
    }
    if (done) break;
  }
  if (buf.trim()) yield buf.trim();
}
