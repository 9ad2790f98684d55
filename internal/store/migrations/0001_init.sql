-- 0001_init: the tables and indexes of "Idempotency on a Single Writer".
--
-- Every timestamp column holds INTEGER Unix nanoseconds (UTC). Integers compare
-- correctly with < and > regardless of time zone or formatting, which is what the
-- TTL and expiry comparisons below rely on. NULL means "not set".
--
-- The tables are STRICT so a value of the wrong type is an error instead of being
-- stored silently. Tables whose rows are small and always found by their primary
-- key are WITHOUT ROWID: the primary key is then the table itself rather than a
-- second b-tree beside it, which saves a page write on every insert. Several writes use INSERT OR IGNORE, which also swallows CHECK
-- and NOT NULL failures, so the Go code validates its input before inserting and
-- the CHECK constraints here are only a second line of defence.

CREATE TABLE sandboxes (
  id           TEXT    PRIMARY KEY,
  name         TEXT    NOT NULL DEFAULT '',
  image        TEXT    NOT NULL DEFAULT '',
  template     TEXT    NOT NULL DEFAULT '',
  state        TEXT    NOT NULL DEFAULT '',
  labels       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(labels)),
  env          TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(env)),
  cpu          REAL    NOT NULL DEFAULT 0,
  memory_mb    INTEGER NOT NULL DEFAULT 0,
  container_id TEXT    NOT NULL DEFAULT '',
  access_token TEXT    NOT NULL DEFAULT '',
  end_at       INTEGER,
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL
) STRICT;

-- Unnamed sandboxes ('') may repeat; any non-empty name is unique on this node.
CREATE UNIQUE INDEX idx_sandboxes_name ON sandboxes(name) WHERE name <> '';
-- Stable paging walks (created_at, id).
CREATE INDEX idx_sandboxes_created ON sandboxes(created_at, id);
-- The expiry sweep only looks at sandboxes with a deadline.
CREATE INDEX idx_sandboxes_end_at ON sandboxes(end_at) WHERE end_at IS NOT NULL;

CREATE TABLE exposed_ports (
  sandbox_id TEXT    NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
  protocol   TEXT    NOT NULL DEFAULT 'http',
  host_port  INTEGER NOT NULL DEFAULT 0 CHECK (host_port BETWEEN 0 AND 65535),
  public_url TEXT    NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  PRIMARY KEY (sandbox_id, port)
) STRICT, WITHOUT ROWID;

-- host_port is the port bound on the host. 0 (no host port, e.g. HTTP previews)
-- may repeat; a bound port belongs to exactly one exposure.
CREATE UNIQUE INDEX idx_exposed_ports_host_port ON exposed_ports(host_port) WHERE host_port > 0;

CREATE TABLE firecracker_tap_pool (
  slot         INTEGER PRIMARY KEY CHECK (slot >= 0),
  tap_name     TEXT    NOT NULL UNIQUE,
  vsock_cid    INTEGER NOT NULL UNIQUE CHECK (vsock_cid >= 3),
  sandbox_id   TEXT    REFERENCES sandboxes(id) ON DELETE SET NULL,
  allocated_at INTEGER
) STRICT;

-- sandbox_id is NULL while the slot is free; a sandbox holds at most one slot.
CREATE UNIQUE INDEX idx_firecracker_tap_pool_sandbox ON firecracker_tap_pool(sandbox_id) WHERE sandbox_id IS NOT NULL;

CREATE TABLE sandbox_custom_domains (
  -- DNS names are case-insensitive (and ASCII once IDNA-encoded), so the key is
  -- too: "Example.com" and "example.com" are one binding.
  hostname   TEXT    PRIMARY KEY COLLATE NOCASE,
  sandbox_id TEXT    NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
  created_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX idx_sandbox_custom_domains_sandbox ON sandbox_custom_domains(sandbox_id);

CREATE TABLE request_idempotency (
  scope           TEXT    NOT NULL,
  fingerprint     TEXT    NOT NULL,
  target_id       TEXT    NOT NULL DEFAULT '',
  state           TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'ready')),
  generation      INTEGER NOT NULL DEFAULT 1 CHECK (generation >= 1),
  request_hash    TEXT    NOT NULL DEFAULT '',
  response_status INTEGER NOT NULL DEFAULT 0,
  response_body   BLOB,
  locked_until    INTEGER NOT NULL,
  replay_until    INTEGER,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL,
  PRIMARY KEY (scope, fingerprint)
) STRICT;

-- There is deliberately no index on locked_until or replay_until. Rows live for
-- minutes, so the periodic reaper's scan is short, whereas an index would cost a
-- page write on every claim, the hottest write in the daemon. The table keeps
-- its rowid because response_body can hold a whole HTTP response, and large rows
-- are what WITHOUT ROWID handles badly.
