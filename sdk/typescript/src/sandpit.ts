import { events, type EventsOptions, type SandpitEvent } from './events.js';
import { HttpClient, retryPolicy, type MutationOptions, type RetryOptions } from './http.js';
import { Sandbox } from './sandbox.js';
import { Snapshots, Templates } from './templates.js';
import type { SandboxState, WireSandbox } from './types.js';

export interface SandpitOptions {
  /** The daemon's address, `http://host:port` or `host:port`. Default: SANDPIT_ADDR, else 127.0.0.1:7420. */
  apiUrl?: string;
  /** The API token. Default: SANDPIT_TOKEN. */
  token?: string;
  /** How calls are retried; `{ maxAttempts: 1 }` turns retries off. */
  retry?: RetryOptions;
}

export interface CreateOptions extends MutationOptions {
  /** Image to run; the daemon's default image when left out. */
  image?: string;
  /** A template to create from (name, name:tag or id): its image, defaults and start command. */
  template?: string;
  /** A unique name: a second sandbox with the same name is a NameConflictError. */
  name?: string;
  env?: Record<string, string>;
  labels?: Record<string, string>;
  cpu?: number;
  memoryMB?: number;
  /** Lifetime: the sandbox is removed this long after creation (rounded up to seconds). */
  timeoutMs?: number;
}

export interface ListOptions {
  /** Only sandboxes carrying all these labels. */
  labels?: Record<string, string>;
  /** Only sandboxes in one of these states. */
  states?: SandboxState[];
  /** Sandboxes per page (1-1000); the daemon's default when left out. */
  pageSize?: number;
  signal?: AbortSignal;
}

/**
 * Sandpit is a client of one daemon's native API. Every mutating call
 * carries an Idempotency-Key generated once per call and reused on each
 * retry, so a retried call never makes a second sandbox or takes a second
 * port.
 */
export class Sandpit {
  readonly #http: HttpClient;
  /** The caller's templates: build, get, list, delete and build logs. */
  readonly templates: Templates;
  /** The caller's snapshots: list and delete (Sandbox.snapshot takes them). */
  readonly snapshots: Snapshots;

  constructor(opts: SandpitOptions = {}) {
    let apiUrl = opts.apiUrl || process.env.SANDPIT_ADDR || '127.0.0.1:7420';
    if (!apiUrl.includes('://')) apiUrl = `http://${apiUrl}`;
    const token = opts.token || process.env.SANDPIT_TOKEN;
    if (!token) {
      throw new Error('sandpit: no token: pass { token } or set SANDPIT_TOKEN');
    }
    this.#http = new HttpClient(apiUrl.replace(/\/+$/, ''), token, retryPolicy(opts.retry));
    this.templates = new Templates(this.#http);
    this.snapshots = new Snapshots(this.#http);
  }

  /** The daemon's base URL. */
  get apiUrl(): string {
    return this.#http.baseUrl;
  }

  /** Creates a sandbox and resolves once it is running. */
  async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const { idempotencyKey, signal, image, template, name, env, labels, cpu, memoryMB, timeoutMs } = opts;
    const json: Record<string, unknown> = {};
    if (image) json.image = image;
    if (template) json.template = template;
    if (name) json.name = name;
    if (env) json.env = env;
    if (labels) json.labels = labels;
    if (cpu) json.cpu = cpu;
    if (memoryMB) json.memory_mb = memoryMB;
    if (timeoutMs) json.timeout_s = Math.ceil(timeoutMs / 1000);
    const { data } = await this.#http.sendJSON<WireSandbox>({
      method: 'POST', path: '/v1/sandboxes', json, retry: true, keyed: true, idempotencyKey, signal,
    });
    return new Sandbox(this.#http, data);
  }

  /** Returns a sandbox by id; a missing one is a NotFoundError. */
  async get(id: string, opts: { signal?: AbortSignal } = {}): Promise<Sandbox> {
    const { data } = await this.#http.sendJSON<WireSandbox>({
      method: 'GET', path: `/v1/sandboxes/${encodeURIComponent(id)}`, retry: true, signal: opts.signal,
    });
    return new Sandbox(this.#http, data);
  }

  /**
   * Lists sandboxes, fetching pages as the iteration reaches them:
   * `for await (const sb of sandpit.list({ labels: { job: 'ci' } }))`.
   * `list(...).pages()` iterates page by page instead.
   */
  list(opts: ListOptions = {}): SandboxList {
    return new SandboxList(this.#http, opts);
  }

  /**
   * Streams the daemon's sandbox events (GET /v1/events, Server-Sent
   * Events). The iterator reconnects after a dropped connection, resuming
   * from the last event id; break out of the loop or abort the signal to
   * stop. A daemon without the endpoint makes it throw NotFoundError.
   */
  events(opts: EventsOptions = {}): AsyncIterableIterator<SandpitEvent> {
    return events(this.#http, opts);
  }
}

/** SandboxList is an async iterable of sandboxes over the listing's pages. */
export class SandboxList implements AsyncIterable<Sandbox> {
  readonly #http: HttpClient;
  readonly #opts: ListOptions;

  /** @internal */
  constructor(http: HttpClient, opts: ListOptions) {
    this.#http = http;
    this.#opts = opts;
  }

  async *pages(): AsyncIterableIterator<Sandbox[]> {
    let token = '';
    do {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(this.#opts.labels ?? {})) q.append('label', `${k}=${v}`);
      if (this.#opts.states?.length) q.set('state', this.#opts.states.join(','));
      if (this.#opts.pageSize) q.set('limit', String(this.#opts.pageSize));
      if (token) q.set('page_token', token);
      const { data } = await this.#http.sendJSON<{ sandboxes: WireSandbox[]; next_page_token?: string }>({
        method: 'GET', path: '/v1/sandboxes', query: q, retry: true, signal: this.#opts.signal,
      });
      yield data.sandboxes.map((w) => new Sandbox(this.#http, w));
      token = data.next_page_token ?? '';
    } while (token);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Sandbox> {
    for await (const page of this.pages()) yield* page;
  }

  /** Collects every sandbox of the listing. */
  async toArray(): Promise<Sandbox[]> {
    const all: Sandbox[] = [];
    for await (const sb of this) all.push(sb);
    return all;
  }
}
