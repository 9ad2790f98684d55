import { NetworkError, SandpitError } from './errors.js';
import { parseError, sleep, type HttpClient } from './http.js';

export interface EventsOptions {
  /** Ends the iteration (it then returns normally). */
  signal?: AbortSignal;
}

/**
 * One Server-Sent Event of /v1/events. A sandbox state change is named by
 * its type (created, started, stopped, paused, resumed, expired, deleted,
 * died) and its data carries `sandbox_id`, `state` (empty once the sandbox is
 * gone), `old_state` and `time`, lifted into the typed fields below; a
 * template build's change carries the template and the build instead.
 */
export interface SandpitEvent {
  /** The SSE event name, else the `type` field of the data, else `message`. */
  type: string;
  /** The SSE event id, used to resume after a reconnect. */
  id?: string;
  sandboxId?: string;
  state?: string;
  oldState?: string;
  time?: Date;
  /**
   * Set on a template build's change (type `template.building`,
   * `template.ready` or `template.error`), which names no sandbox; `state` is
   * the build's state and `error` a failed build's reason.
   */
  templateId?: string;
  template?: string;
  buildId?: string;
  error?: string;
  /** The event's JSON `data:` payload, parsed (the raw text when it is not JSON). */
  data: any;
}

/**
 * events iterates GET /v1/events. A dropped connection, or a 429/502/503/504,
 * is retried with the client's backoff, sending Last-Event-ID so the daemon
 * can resume; the retries are counted from the last successful connection.
 * Any other error answer (401, 404 on a daemon without the endpoint) throws
 * its typed error.
 */
export async function* events(http: HttpClient, opts: EventsOptions): AsyncGenerator<SandpitEvent> {
  const { signal } = opts;
  let lastId: string | undefined;
  let failures = 0;
  for (;;) {
    if (signal?.aborted) return;
    const ac = new AbortController();
    const onAbort = () => ac.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    let failure: SandpitError | undefined;
    try {
      const headers = http.headers({ accept: 'text/event-stream' });
      if (lastId !== undefined) headers['last-event-id'] = lastId;
      let res: Response;
      try {
        res = await fetch(`${http.baseUrl}/v1/events`, { headers, signal: ac.signal });
      } catch (err) {
        if (signal?.aborted) return;
        throw new NetworkError(`GET /v1/events: ${(err as Error).message}`, { status: 0, code: 'network', cause: err });
      }
      if (!res.ok) {
        const err = parseError(res.status, new Uint8Array(await res.arrayBuffer()));
        if (![429, 502, 503, 504].includes(res.status)) throw err;
        throw new NetworkError(err.message, { status: res.status, code: err.code, cause: err });
      }
      failures = 0;
      try {
        for await (const ev of parseSSE(res.body!)) {
          if (ev.id !== undefined) lastId = ev.id;
          yield ev;
        }
      } catch (err) {
        if (signal?.aborted) return;
        throw new NetworkError(`GET /v1/events: stream cut: ${(err as Error).message}`, { status: 0, code: 'network', cause: err });
      }
      // The daemon ended the stream (a restart, say): reconnect.
    } catch (err) {
      if (!(err instanceof NetworkError)) throw err;
      failure = err;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      ac.abort();
    }
    if (failure) {
      failures++;
      if (failures >= http.policy.maxAttempts) throw failure;
    }
    const ceiling = Math.min(http.policy.maxDelayMs, http.policy.baseDelayMs * 2 ** Math.max(0, failures - 1));
    try {
      await sleep(Math.random() * ceiling + 1, signal);
    } catch {
      return;
    }
  }
}

/** parseSSE decodes a text/event-stream body into events with JSON data. */
async function* parseSSE(body: ReadableStream<Uint8Array>): AsyncGenerator<SandpitEvent> {
  const decoder = new TextDecoder();
  let buf = '';
  let name = '';
  let id: string | undefined;
  let data: string[] = [];
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = buf.slice(0, nl);
      // A lone \r at the very end may be half of \r\n: wait for more.
      if (buf[nl] === '\r' && nl === buf.length - 1) break;
      buf = buf.slice(nl + (buf.startsWith('\r\n', nl) ? 2 : 1));
      if (line === '') {
        if (data.length > 0) yield toEvent(name, id, data.join('\n'));
        name = '';
        data = [];
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') data.push(value);
      else if (field === 'event') name = value;
      else if (field === 'id' && !value.includes('\0')) id = value;
    }
  }
}

function toEvent(name: string, id: string | undefined, raw: string): SandpitEvent {
  let data: any = raw;
  try {
    data = JSON.parse(raw);
  } catch {
    // Not JSON: handed over as text.
  }
  const obj: Record<string, unknown> = data && typeof data === 'object' ? data : {};
  const str = (k: string) => (typeof obj[k] === 'string' ? (obj[k] as string) : undefined);
  const ev: SandpitEvent = { type: name || str('type') || 'message', id, data };
  if (str('sandbox_id') !== undefined) ev.sandboxId = str('sandbox_id');
  if (str('state') !== undefined) ev.state = str('state');
  if (str('old_state') !== undefined) ev.oldState = str('old_state');
  if (str('time') !== undefined) ev.time = new Date(str('time')!);
  if (str('build_id')) {
    ev.templateId = str('template_id');
    ev.template = str('template');
    ev.buildId = str('build_id');
    if (str('error')) ev.error = str('error');
  }
  return ev;
}
