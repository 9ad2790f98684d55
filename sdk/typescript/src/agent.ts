import { Code, ConnectError, createClient, type Client } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';

import { AuthError, NotFoundError, SandpitError, TimeoutError } from './errors.js';
import { Filesystem } from './gen/filesystem/filesystem_pb.js';
import { Process } from './gen/process/process_pb.js';
import type { HttpClient } from './http.js';

/**
 * AgentClients reach a sandbox's agent (the envd Connect protocol) through
 * the daemon, which proxies /v1/sandboxes/{id}/agent/... to the agent and
 * adds the agent's own access token; the caller only shows its API token.
 */
export interface AgentClients {
  process: Client<typeof Process>;
  filesystem: Client<typeof Filesystem>;
}

export function agentClients(http: HttpClient, sandboxId: string): AgentClients {
  const transport = createConnectTransport({
    baseUrl: `${http.baseUrl}/v1/sandboxes/${encodeURIComponent(sandboxId)}/agent`,
    httpVersion: '1.1',
    useBinaryFormat: true,
    interceptors: [
      (next) => (req) => {
        for (const [k, v] of Object.entries(http.headers())) req.header.set(k, v);
        return next(req);
      },
    ],
  });
  return { process: createClient(Process, transport), filesystem: createClient(Filesystem, transport) };
}

/**
 * fromConnect maps an agent-protocol failure to the SDK's typed errors. The
 * codes the agent itself sends map directly; a failure of the daemon in
 * front of it (no such sandbox, sandbox not running) reaches a Connect client
 * only as an HTTP status without its native body, so `diagnose` asks the
 * REST API what is wrong with the sandbox to name it properly.
 */
export async function fromConnect(err: unknown, diagnose: () => Promise<void>): Promise<SandpitError> {
  if (err instanceof SandpitError) return err;
  const ce = ConnectError.from(err);
  switch (ce.code) {
    case Code.NotFound:
      return new NotFoundError(ce.rawMessage, { status: 404, code: 'not_found', cause: ce });
    case Code.DeadlineExceeded:
      return new TimeoutError(ce.rawMessage, { status: 504, code: 'timeout', cause: ce });
    case Code.InvalidArgument:
      return new SandpitError(ce.rawMessage, { status: 400, code: 'bad_request', cause: ce });
    case Code.Canceled:
      return new SandpitError(ce.rawMessage, { status: 499, code: 'canceled', cause: ce });
    case Code.Unauthenticated:
      return new AuthError(ce.rawMessage, { status: 401, code: 'unauthorized', cause: ce });
  }
  try {
    await diagnose();
  } catch (e) {
    if (e instanceof SandpitError) return e;
  }
  return new SandpitError(ce.rawMessage, { status: 0, code: Code[ce.code]?.toLowerCase() ?? 'unknown', cause: ce });
}
