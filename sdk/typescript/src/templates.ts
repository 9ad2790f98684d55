import { createHash } from 'node:crypto';

import { NetworkError, SandpitError } from './errors.js';
import { ndjsonLines, parseError, type HttpClient, type MutationOptions } from './http.js';

/** A build's state: waiting, building, ready or error. */
export type BuildState = 'waiting' | 'building' | 'ready' | 'error';

/** One build of a template (the wire shape of /v1/templates). */
export interface TemplateBuild {
  id: string;
  template_id: string;
  state: BuildState;
  image?: string;
  /** A failed build's reason: the engine's message. */
  error?: string;
  dockerfile?: string;
  created_at: string;
  started_at?: string;
  ended_at?: string;
}

/** A template as /v1/templates reports it. */
export interface Template {
  id: string;
  name?: string;
  owner: string;
  /** The image of the newest ready build. */
  image?: string;
  /** tag -> build id */
  tags?: Record<string, string>;
  cpu?: number;
  memory_mb?: number;
  start_cmd?: string;
  ready_cmd?: string;
  user?: string;
  workdir?: string;
  /** The newest build, whatever its state. */
  build?: TemplateBuild;
  /** `build`, or `snapshot` for a snapshot of `source_sandbox`. */
  kind?: 'build' | 'snapshot';
  source_sandbox?: string;
  created_at: string;
  updated_at: string;
}

/** One line of a build's log. */
export interface BuildLogEntry {
  time: string;
  level: string;
  message: string;
}

export interface BuildOptions extends MutationOptions {
  /** The template's name: the first build makes it, later ones rebuild it. */
  name: string;
  dockerfile: string;
  /** The build context: a tar archive (gzipped or not), uploaded by its SHA-256. */
  context?: Uint8Array;
  startCmd?: string;
  readyCmd?: string;
  user?: string;
  workdir?: string;
  cpu?: number;
  memoryMB?: number;
  tags?: string[];
  /** Build anew: no replay of an earlier build of the same definition, no layer cache. */
  noCache?: boolean;
  /** Called with each log line while the build runs. */
  onLogs?: (line: BuildLogEntry) => void;
  /** Resolve once the build started instead of when it ends. */
  background?: boolean;
}

/** A build that ended in error; `build.error` is the engine's reason. */
export class TemplateBuildError extends SandpitError {
  readonly build: TemplateBuild;

  constructor(build: TemplateBuild) {
    super(`template build ${build.id} failed: ${build.error ?? 'unknown error'}`, { status: 0, code: 'build_failed' });
    this.build = build;
  }
}

const path = (ref: string) => `/v1/templates/${encodeURIComponent(ref)}`;

/**
 * Templates builds and manages the caller's templates: images built from a
 * Dockerfile and its context, that sandboxes are created from with
 * `sandpit.create({ template: name })`.
 */
export class Templates {
  readonly #http: HttpClient;

  /** @internal */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * Builds a template, following its log until the build ends (unless
   * `background`); a failed build throws TemplateBuildError. The call
   * carries an Idempotency-Key reused on every retry, and a rebuild of the
   * same definition replays the earlier build instead of building again.
   */
  async build(opts: BuildOptions): Promise<{ template: Template; build: TemplateBuild }> {
    const json: Record<string, unknown> = { name: opts.name, dockerfile: opts.dockerfile };
    if (opts.context) json.context = await this.upload(opts.context, opts.signal);
    if (opts.startCmd) json.start_cmd = opts.startCmd;
    if (opts.readyCmd) json.ready_cmd = opts.readyCmd;
    if (opts.user) json.user = opts.user;
    if (opts.workdir) json.workdir = opts.workdir;
    if (opts.cpu) json.cpu = opts.cpu;
    if (opts.memoryMB) json.memory_mb = opts.memoryMB;
    if (opts.tags?.length) json.tags = opts.tags;
    if (opts.noCache) json.no_cache = true;
    const { data } = await this.#http.sendJSON<{ template: Template; build: TemplateBuild }>({
      method: 'POST', path: '/v1/templates', json, retry: true, keyed: true,
      idempotencyKey: opts.idempotencyKey, signal: opts.signal,
    });
    if (opts.background) return data;
    for await (const line of this.logs(data.template.id, data.build.id, { follow: true, signal: opts.signal })) {
      opts.onLogs?.(line);
    }
    const build = await this.getBuild(data.template.id, data.build.id, opts.signal);
    if (build.state === 'error') throw new TemplateBuildError(build);
    return { template: await this.get(data.template.id, { signal: opts.signal }), build };
  }

  /** Uploads a context archive unless the daemon has it already; resolves to its hash. */
  async upload(archive: Uint8Array, signal?: AbortSignal): Promise<string> {
    const hash = createHash('sha256').update(archive).digest('hex');
    const p = `/v1/templates/files/${hash}`;
    try {
      await this.#http.send({ method: 'GET', path: p, retry: true, signal });
      return hash;
    } catch (err) {
      if (!(err instanceof SandpitError) || err.status !== 404) throw err;
    }
    // Named by its content: sending it again changes nothing, so it is
    // retried like a read.
    await this.#http.send({ method: 'PUT', path: p, bytes: archive, retry: true, signal });
    return hash;
  }

  /** Returns a template by name, name:tag or id; a missing one is a NotFoundError. */
  async get(ref: string, opts: { signal?: AbortSignal } = {}): Promise<Template> {
    const { data } = await this.#http.sendJSON<Template>({ method: 'GET', path: path(ref), retry: true, signal: opts.signal });
    return data;
  }

  /** Lists the caller's templates. */
  async list(opts: { signal?: AbortSignal } = {}): Promise<Template[]> {
    const { data } = await this.#http.sendJSON<{ templates: Template[] }>({
      method: 'GET', path: '/v1/templates', retry: true, signal: opts.signal,
    });
    return data.templates;
  }

  /** Deletes a template and its images. */
  async delete(ref: string, opts: MutationOptions = {}): Promise<void> {
    await this.#http.send({
      method: 'DELETE', path: path(ref), retry: true, keyed: true, idempotencyKey: opts.idempotencyKey, signal: opts.signal,
    });
  }

  /** Returns one build of a template. */
  async getBuild(ref: string, buildId: string, signal?: AbortSignal): Promise<TemplateBuild> {
    const { data } = await this.#http.sendJSON<TemplateBuild>({
      method: 'GET', path: `${path(ref)}/builds/${encodeURIComponent(buildId)}`, retry: true, signal,
    });
    return data;
  }

  /**
   * Iterates a build's log from line `offset`: with `follow`, until the
   * build ends; otherwise the lines there are now.
   */
  async *logs(ref: string, buildId: string, opts: { follow?: boolean; offset?: number; signal?: AbortSignal } = {}):
    AsyncGenerator<BuildLogEntry> {
    const q = new URLSearchParams({ offset: String(opts.offset ?? 0) });
    if (opts.follow) q.set('follow', 'true');
    const url = `${this.#http.baseUrl}${path(ref)}/builds/${encodeURIComponent(buildId)}/logs?${q}`;
    let res: Response;
    try {
      res = await fetch(url, { headers: this.#http.headers(), signal: opts.signal });
    } catch (err) {
      throw new NetworkError(`GET build logs: ${(err as Error).message}`, { status: 0, code: 'network', cause: err });
    }
    if (!res.ok) throw parseError(res.status, new Uint8Array(await res.arrayBuffer()));
    for await (const line of ndjsonLines(res.body!)) yield JSON.parse(line) as BuildLogEntry;
  }
}

/** Snapshots lists and deletes the caller's snapshots (Sandbox.snapshot makes them). */
export class Snapshots {
  readonly #http: HttpClient;

  /** @internal */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /** Lists the caller's snapshots, of one sandbox and of one name when given. */
  async list(opts: { sandbox?: string; name?: string; signal?: AbortSignal } = {}): Promise<Template[]> {
    const q = new URLSearchParams();
    if (opts.sandbox) q.set('sandbox', opts.sandbox);
    if (opts.name) q.set('name', opts.name);
    const { data } = await this.#http.sendJSON<{ snapshots: Template[] }>({
      method: 'GET', path: '/v1/snapshots', query: q, retry: true, signal: opts.signal,
    });
    return data.snapshots;
  }

  /** Deletes a snapshot; a sandbox running from it makes this a 409 `in_use`. */
  async delete(ref: string, opts: MutationOptions = {}): Promise<void> {
    await this.#http.send({
      method: 'DELETE', path: `/v1/snapshots/${encodeURIComponent(ref)}`, retry: true, keyed: true, idempotencyKey: opts.idempotencyKey, signal: opts.signal,
    });
  }
}
