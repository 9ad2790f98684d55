import { Code, ConnectError } from '@connectrpc/connect';
import { timestampDate } from '@bufbuild/protobuf/wkt';

import { agentClients, fromConnect, type AgentClients } from './agent.js';
import { NetworkError, SandboxPausedError, SandboxStoppedError, SandpitError } from './errors.js';
import { FileType, type EntryInfo } from './gen/filesystem/filesystem_pb.js';
import { ndjsonLines, parseError, sleep, type HttpClient, type MutationOptions } from './http.js';
import type { Template } from './templates.js';
import {
  customDomain,
  exposedPort,
  sandboxInfo,
  type CustomDomain,
  type ExposedPort,
  type PortProtocol,
  type SandboxInfo,
  type SandboxState,
  type WireDomain,
  type WirePort,
  type WireSandbox,
} from './types.js';

export interface ExecOptions {
  /** Receives stdout as it arrives, decoded as UTF-8. */
  onStdout?: (chunk: string) => void;
  /** Receives stderr as it arrives, decoded as UTF-8. */
  onStderr?: (chunk: string) => void;
  env?: Record<string, string>;
  cwd?: string;
  /** Kills the command after this long and rejects with TimeoutError. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

export interface RunCodeOptions {
  /** `python` (the default). */
  language?: string;
  /**
   * A context of your choosing: code run in one context shares its
   * variables, and the context is made on first use. Omitted, the code runs
   * in the language's default context.
   */
  context?: string;
  /** Environment variables for this run only. */
  env?: Record<string, string>;
  /** Interrupts the code after this long (rounded up to seconds); the context stays usable. */
  timeoutMs?: number;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onResult?: (result: CodeResult) => void;
  signal?: AbortSignal;
}

/**
 * One result of a run: the cell's value (`isMainResult`) or a display call
 * such as a chart, in every MIME form the kernel gave (`png` and `jpeg` are
 * base64).
 */
export interface CodeResult {
  isMainResult: boolean;
  text?: string;
  html?: string;
  markdown?: string;
  png?: string;
  jpeg?: string;
  svg?: string;
  latex?: string;
  json?: unknown;
  chart?: unknown;
}

/** The code's uncaught exception. */
export interface CodeError {
  name: string;
  value: string;
  traceback: string;
}

export interface Execution {
  results: CodeResult[];
  logs: { stdout: string[]; stderr: string[] };
  error?: CodeError;
  executionCount?: number;
  /** The plain text of the cell's value. */
  text?: string;
}

export interface ExposeOptions extends MutationOptions {
  /** `http` (default) through the preview proxy, or `tcp` on a host port from the pool. */
  protocol?: PortProtocol;
}

export type FileKind = 'file' | 'dir' | 'symlink' | 'unknown';

export interface FileEntry {
  name: string;
  /** Absolute path inside the sandbox. */
  path: string;
  type: FileKind;
  size: number;
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  modifiedTime?: Date;
  symlinkTarget?: string;
}

/** A sandbox. Its fields are a snapshot; `refresh()` reloads them. */
export class Sandbox implements SandboxInfo {
  id!: string;
  name?: string;
  image!: string;
  state!: SandboxState;
  labels!: Record<string, string>;
  env!: Record<string, string>;
  cpu?: number;
  memoryMB?: number;
  createdAt!: Date;
  updatedAt!: Date;
  endAt?: Date;

  /** Files inside the sandbox, through its agent. */
  readonly files: Files;

  readonly #http: HttpClient;
  #agent?: AgentClients;

  /** @internal Use Sandpit.create or Sandpit.get. */
  constructor(http: HttpClient, wire: WireSandbox) {
    this.#http = http;
    this.#assign(wire);
    this.files = new Files(this.#path(), http, () => this.#clients(), () => this.#diagnose());
  }

  #assign(wire: WireSandbox): void {
    Object.assign(this, sandboxInfo(wire));
  }

  #path(suffix = ''): string {
    return `/v1/sandboxes/${encodeURIComponent(this.id)}${suffix}`;
  }

  #clients(): AgentClients {
    this.#agent ??= agentClients(this.#http, this.id);
    return this.#agent;
  }

  /** #diagnose throws the REST API's typed error when the sandbox is missing or not running. */
  async #diagnose(): Promise<void> {
    await this.refresh();
    switch (this.state) {
      case 'running':
        return;
      case 'paused':
        throw new SandboxPausedError(`sandbox ${this.id} is paused: resume it first`, { status: 409, code: 'sandbox_paused' });
      case 'stopped':
        throw new SandboxStoppedError(`sandbox ${this.id} is stopped: start it first`, { status: 409, code: 'sandbox_stopped' });
    }
    throw new SandpitError(`sandbox ${this.id} is ${this.state}, not running`, { status: 409, code: 'not_running' });
  }

  /** Reloads the sandbox's fields. */
  async refresh(opts: { signal?: AbortSignal } = {}): Promise<this> {
    const { data } = await this.#http.sendJSON<WireSandbox>({ method: 'GET', path: this.#path(), retry: true, signal: opts.signal });
    this.#assign(data);
    return this;
  }

  /** Deletes the sandbox and its container. */
  async delete(opts: MutationOptions = {}): Promise<void> {
    await this.#http.send({ method: 'DELETE', path: this.#path(), retry: true, keyed: true, ...opts });
  }

  async start(opts: MutationOptions = {}): Promise<this> {
    return this.#lifecycle('/start', opts);
  }

  async stop(opts: MutationOptions = {}): Promise<this> {
    return this.#lifecycle('/stop', opts);
  }

  /**
   * Commits the sandbox's filesystem as a snapshot (a template of kind
   * snapshot): `sandpit.create({ template: snapshot.id })`, or its name,
   * makes sandboxes with its files. The sandbox keeps running. Retried with
   * one Idempotency-Key, so a retry makes no second snapshot.
   */
  async snapshot(opts: MutationOptions & { name?: string } = {}): Promise<Template> {
    const { name, ...rest } = opts;
    const { data } = await this.#http.sendJSON<Template>({
      method: 'POST', path: this.#path('/snapshots'), json: name ? { name } : {}, retry: true, keyed: true, ...rest,
    });
    return data;
  }

  /**
   * Copies the sandbox: one snapshot of it, then `count` sandboxes (default
   * 1) from that snapshot, each with its files, limits, env and labels. Each
   * entry is a running Sandbox or the SandpitError of the copy that failed.
   * A retry (one Idempotency-Key) answers with the same copies.
   */
  async fork(opts: MutationOptions & { count?: number; timeoutMs?: number; name?: string } = {}): Promise<Array<Sandbox | SandpitError>> {
    const { count, timeoutMs, name, ...rest } = opts;
    const json: Record<string, unknown> = {};
    if (count !== undefined) json.count = count;
    if (timeoutMs) json.timeout_s = Math.ceil(timeoutMs / 1000);
    if (name) json.name = name;
    const { data } = await this.#http.sendJSON<{ forks: Array<{ sandbox?: WireSandbox; error?: { code: string; message: string } }> }>({
      method: 'POST', path: this.#path('/fork'), json, retry: true, keyed: true, ...rest,
    });
    return data.forks.map((f) =>
      f.sandbox ? new Sandbox(this.#http, f.sandbox) : new SandpitError(f.error?.message ?? 'the copy failed', { status: 500, code: f.error?.code ?? 'internal' }));
  }

  async #lifecycle(suffix: string, opts: MutationOptions): Promise<this> {
    const { data } = await this.#http.sendJSON<WireSandbox>({ method: 'POST', path: this.#path(suffix), retry: true, keyed: true, ...opts });
    this.#assign(data);
    return this;
  }

  /**
   * Runs a command and streams its output. A string runs under `/bin/sh -c`;
   * an array is the program and its arguments, run without a shell. Resolves
   * when the command ends, whatever its exit code. Never retried: running a
   * command twice is not running it once.
   */
  async exec(cmd: string | readonly string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const [program, ...args] = typeof cmd === 'string' ? ['/bin/sh', '-c', cmd] : cmd;
    if (!program) throw new SandpitError('exec: empty command', { status: 0, code: 'bad_request' });
    const out = new Output(opts.onStdout);
    const err = new Output(opts.onStderr);
    let exitCode: number | undefined;
    try {
      const stream = this.#clients().process.start(
        { process: { cmd: program, args, envs: opts.env ?? {}, cwd: opts.cwd } },
        { timeoutMs: opts.timeoutMs, signal: opts.signal },
      );
      for await (const msg of stream) {
        const ev = msg.event?.event;
        if (ev?.case === 'data') {
          const o = ev.value.output;
          if (o.case === 'stdout') out.push(o.value);
          else if (o.case === 'stderr') err.push(o.value);
        } else if (ev?.case === 'end') {
          if (!ev.value.exited && ev.value.error) {
            throw new SandpitError(`exec: ${ev.value.error}`, { status: 0, code: 'exec_failed' });
          }
          exitCode = ev.value.exitCode;
        }
      }
    } catch (e) {
      if (opts.signal?.aborted) throw e;
      throw await fromConnect(e, () => this.#diagnose());
    }
    if (exitCode === undefined) {
      throw new SandpitError('exec: the stream ended without an exit status', { status: 0, code: 'exec_failed' });
    }
    return { exitCode, stdout: out.end(), stderr: err.end() };
  }

  /**
   * Runs code on the sandbox's code interpreter (a sandbox made from the
   * `code-interpreter-v1` template): state persists between runs of one
   * context, output streams to the callbacks, and results come back in their
   * MIME forms. The code's own exception is `execution.error`, not a
   * rejection. Never retried: running code twice is not running it once.
   */
  async runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    const json: Record<string, unknown> = { code };
    if (opts.language) json.language = opts.language;
    if (opts.context) json.context = opts.context;
    if (opts.env) json.env = opts.env;
    if (opts.timeoutMs) json.timeout_s = Math.ceil(opts.timeoutMs / 1000);
    let res: Response;
    try {
      res = await fetch(this.#http.baseUrl + this.#path('/code'), {
        method: 'POST',
        headers: this.#http.headers({ 'content-type': 'application/json' }),
        body: JSON.stringify(json),
        signal: opts.signal,
      });
    } catch (err) {
      if (opts.signal?.aborted) throw err;
      throw new NetworkError(`runCode: ${(err as Error).message}`, { status: 0, code: 'network', cause: err });
    }
    if (!res.ok) throw parseError(res.status, new Uint8Array(await res.arrayBuffer()));
    const ex: Execution = { results: [], logs: { stdout: [], stderr: [] } };
    const handle = (line: string) => {
      const ev = JSON.parse(line) as Record<string, unknown> & { type: string };
      switch (ev.type) {
        case 'stdout':
          ex.logs.stdout.push(String(ev.text ?? ''));
          opts.onStdout?.(String(ev.text ?? ''));
          break;
        case 'stderr':
          ex.logs.stderr.push(String(ev.text ?? ''));
          opts.onStderr?.(String(ev.text ?? ''));
          break;
        case 'result': {
          const { type: _t, is_main_result: main, ...forms } = ev;
          const r = { ...forms, isMainResult: Boolean(main) } as CodeResult;
          ex.results.push(r);
          if (r.isMainResult) ex.text = r.text;
          opts.onResult?.(r);
          break;
        }
        case 'error': {
          const tb = ev.traceback;
          ex.error = { name: String(ev.name ?? ''), value: String(ev.value ?? ''), traceback: Array.isArray(tb) ? tb.join('\n') : String(tb ?? '') };
          break;
        }
        case 'number_of_executions':
          ex.executionCount = Number(ev.execution_count);
          break;
      }
    };
    for await (const line of ndjsonLines(res.body!)) handle(line);
    return ex;
  }

  /** Removes a named code context and its state; removing one that is gone succeeds. */
  async deleteCodeContext(name: string, opts: MutationOptions = {}): Promise<void> {
    await this.#http.send({ method: 'DELETE', path: this.#path(`/code/contexts/${encodeURIComponent(name)}`), retry: true, ...opts });
  }

  /**
   * Exposes a port of the sandbox. Calling it again for the same port, or a
   * retry of a call whose answer was lost, returns the same exposure
   * (`reused: true`): no second host port is ever taken.
   */
  async exposePort(port: number, opts: ExposeOptions = {}): Promise<ExposedPort> {
    const { protocol, ...rest } = opts;
    const json: { port: number; protocol?: string } = { port };
    if (protocol) json.protocol = protocol;
    const { data } = await this.#http.sendJSON<WirePort>({
      method: 'POST', path: this.#path('/ports'), json, retry: true, keyed: true, ...rest,
    });
    return exposedPort(data);
  }

  async unexposePort(port: number, opts: MutationOptions = {}): Promise<void> {
    await this.#http.send({ method: 'DELETE', path: this.#path(`/ports/${port}`), retry: true, keyed: true, ...opts });
  }

  async ports(opts: { signal?: AbortSignal } = {}): Promise<ExposedPort[]> {
    const { data } = await this.#http.sendJSON<{ ports: WirePort[] }>({ method: 'GET', path: this.#path('/ports'), retry: true, ...opts });
    return data.ports.map(exposedPort);
  }

  /** Binds a hostname to a port of the sandbox; binding it again to the same port is a no-op. */
  async addCustomDomain(hostname: string, port: number, opts: MutationOptions = {}): Promise<CustomDomain> {
    const { data } = await this.#http.sendJSON<WireDomain>({
      method: 'POST', path: this.#path('/custom-domains'), json: { hostname, port }, retry: true, keyed: true, ...opts,
    });
    return customDomain(data);
  }

  async removeCustomDomain(hostname: string, opts: MutationOptions = {}): Promise<void> {
    await this.#http.send({
      method: 'DELETE', path: this.#path(`/custom-domains/${encodeURIComponent(hostname)}`), retry: true, keyed: true, ...opts,
    });
  }

  async customDomains(opts: { signal?: AbortSignal } = {}): Promise<CustomDomain[]> {
    const { data } = await this.#http.sendJSON<{ custom_domains: WireDomain[] }>({
      method: 'GET', path: this.#path('/custom-domains'), retry: true, ...opts,
    });
    return data.custom_domains.map(customDomain);
  }

  toJSON(): SandboxInfo {
    const { files: _files, ...info } = this;
    return info;
  }
}

/** Output collects one stream of a command, decoding UTF-8 across chunk boundaries. */
class Output {
  readonly #decoder = new TextDecoder();
  readonly #parts: string[] = [];
  readonly #on?: (chunk: string) => void;

  constructor(on?: (chunk: string) => void) {
    this.#on = on;
  }

  push(b: Uint8Array): void {
    const s = this.#decoder.decode(b, { stream: true });
    if (s === '') return;
    this.#parts.push(s);
    this.#on?.(s);
  }

  end(): string {
    const s = this.#decoder.decode();
    if (s !== '') {
      this.#parts.push(s);
      this.#on?.(s);
    }
    return this.#parts.join('');
  }
}

/**
 * Files reads and writes whole files over the daemon's /files endpoint and
 * lists and removes through the agent's Filesystem service. Paths are
 * absolute, or relative to the sandbox user's home directory.
 */
export class Files {
  readonly #base: string;
  readonly #http: HttpClient;
  readonly #clients: () => AgentClients;
  readonly #diagnose: () => Promise<void>;

  /** @internal */
  constructor(base: string, http: HttpClient, clients: () => AgentClients, diagnose: () => Promise<void>) {
    this.#base = base;
    this.#http = http;
    this.#clients = clients;
    this.#diagnose = diagnose;
  }

  /** Reads a file as UTF-8 text, or as bytes with `{ format: 'bytes' }`. A missing file is a NotFoundError. */
  read(path: string, opts?: { format?: 'text'; signal?: AbortSignal }): Promise<string>;
  read(path: string, opts: { format: 'bytes'; signal?: AbortSignal }): Promise<Uint8Array>;
  async read(path: string, opts: { format?: 'text' | 'bytes'; signal?: AbortSignal } = {}): Promise<string | Uint8Array> {
    const res = await this.#http.send({
      method: 'GET', path: `${this.#base}/files`, query: new URLSearchParams({ path }), retry: true, signal: opts.signal,
    });
    return opts.format === 'bytes' ? res.body : new TextDecoder().decode(res.body);
  }

  /**
   * Writes a whole file, creating missing parent directories. Retried like
   * an idempotent call: writing the same bytes twice leaves the same file.
   */
  async write(path: string, data: string | Uint8Array | ArrayBuffer, opts: { signal?: AbortSignal } = {}): Promise<void> {
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data instanceof Uint8Array ? data : new Uint8Array(data);
    await this.#http.send({
      method: 'PUT', path: `${this.#base}/files`, query: new URLSearchParams({ path }), bytes, retry: true, signal: opts.signal,
    });
  }

  /** Lists a directory; `depth` > 1 descends into subdirectories. */
  async list(path: string, opts: { depth?: number; signal?: AbortSignal } = {}): Promise<FileEntry[]> {
    const res = await this.#unary((signal) => this.#clients().filesystem.listDir({ path, depth: opts.depth ?? 1 }, { signal }), opts.signal);
    return res.entries.map(fileEntry);
  }

  /** Describes one path; a missing one is a NotFoundError. */
  async stat(path: string, opts: { signal?: AbortSignal } = {}): Promise<FileEntry> {
    const res = await this.#unary((signal) => this.#clients().filesystem.stat({ path }, { signal }), opts.signal);
    if (!res.entry) throw new SandpitError(`stat ${path}: empty answer`, { status: 0, code: 'internal' });
    return fileEntry(res.entry);
  }

  /** Removes a file or a directory tree; removing a missing path succeeds. */
  async remove(path: string, opts: { signal?: AbortSignal } = {}): Promise<void> {
    await this.#unary((signal) => this.#clients().filesystem.remove({ path }, { signal }), opts.signal);
  }

  /**
   * #unary runs a read-only or idempotent agent call, retrying when the
   * daemon or the agent was unavailable, with the REST calls' policy.
   */
  async #unary<T>(call: (signal?: AbortSignal) => Promise<T>, signal?: AbortSignal): Promise<T> {
    const policy = this.#http.policy;
    for (let attempt = 1; ; attempt++) {
      try {
        return await call(signal);
      } catch (e) {
        const unavailable = e instanceof ConnectError && e.code === Code.Unavailable;
        if (!unavailable || attempt >= policy.maxAttempts || signal?.aborted) {
          if (signal?.aborted) throw e;
          throw await fromConnect(e, this.#diagnose);
        }
        const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
        await sleep(Math.random() * ceiling + 1, signal);
      }
    }
  }
}

function fileEntry(e: EntryInfo): FileEntry {
  const kinds: Record<number, FileKind> = {
    [FileType.FILE]: 'file',
    [FileType.DIRECTORY]: 'dir',
    [FileType.SYMLINK]: 'symlink',
  };
  return {
    name: e.name,
    path: e.path,
    type: kinds[e.type] ?? 'unknown',
    size: Number(e.size),
    mode: e.mode,
    permissions: e.permissions,
    owner: e.owner,
    group: e.group,
    modifiedTime: e.modifiedTime ? timestampDate(e.modifiedTime) : undefined,
    symlinkTarget: e.symlinkTarget,
  };
}
