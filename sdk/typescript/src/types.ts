/** Wire shapes of the native API (snake_case) and their SDK forms. */

export type SandboxState = 'creating' | 'running' | 'stopped' | 'paused' | 'error' | (string & {});

export interface SandboxInfo {
  id: string;
  name?: string;
  image: string;
  state: SandboxState;
  labels: Record<string, string>;
  env: Record<string, string>;
  cpu?: number;
  memoryMB?: number;
  createdAt: Date;
  updatedAt: Date;
  /** When the sandbox expires, if it has a lifetime. */
  endAt?: Date;
}

export interface WireSandbox {
  id: string;
  name?: string;
  image: string;
  state: string;
  labels?: Record<string, string> | null;
  env?: Record<string, string> | null;
  cpu?: number;
  memory_mb?: number;
  created_at: string;
  updated_at: string;
  end_at?: string;
}

export function sandboxInfo(w: WireSandbox): SandboxInfo {
  return {
    id: w.id,
    name: w.name || undefined,
    image: w.image,
    state: w.state,
    labels: w.labels ?? {},
    env: w.env ?? {},
    cpu: w.cpu || undefined,
    memoryMB: w.memory_mb || undefined,
    createdAt: new Date(w.created_at),
    updatedAt: new Date(w.updated_at),
    endAt: w.end_at ? new Date(w.end_at) : undefined,
  };
}

export type PortProtocol = 'http' | 'tcp';

export interface ExposedPort {
  /** The port inside the sandbox. */
  port: number;
  protocol: PortProtocol;
  /** The host port of a TCP exposure; 0 for HTTP (served by the preview proxy). */
  hostPort: number;
  /** Where the port is reachable: http://<id>-<port>.<domain>[:proxy] or tcp://host:port. */
  publicUrl: string;
  /** True when the exposure already existed: this call (or a retry of it) made nothing new. */
  reused: boolean;
  createdAt: Date;
}

export interface WirePort {
  port: number;
  protocol: string;
  host_port: number;
  public_url: string;
  reused: boolean;
  created_at: string;
}

export function exposedPort(w: WirePort): ExposedPort {
  return {
    port: w.port,
    protocol: w.protocol as PortProtocol,
    hostPort: w.host_port,
    publicUrl: w.public_url,
    reused: w.reused,
    createdAt: new Date(w.created_at),
  };
}

export interface CustomDomain {
  hostname: string;
  sandboxId: string;
  port: number;
  url: string;
  createdAt: Date;
}

export interface WireDomain {
  hostname: string;
  sandbox_id: string;
  port: number;
  url: string;
  created_at: string;
}

export function customDomain(w: WireDomain): CustomDomain {
  return { hostname: w.hostname, sandboxId: w.sandbox_id, port: w.port, url: w.url, createdAt: new Date(w.created_at) };
}
