-- 0002_tokens: personal access tokens, owners, quotas and the audit log.
--
-- Every sandbox belongs to the owner of the token that made it. Exposed ports,
-- custom domains and tap slots belong to their sandbox (they cascade with it),
-- so they belong to its owner too; idempotency rows carry the owner in their
-- scope. Rows that predate owners belong to the daemon's admin token.
ALTER TABLE sandboxes ADD COLUMN owner TEXT NOT NULL DEFAULT 'admin';

-- An owner's listing walks its own rows in paging order.
CREATE INDEX idx_sandboxes_owner_created ON sandboxes(owner, created_at, id);

-- api_tokens holds no secret: secret_hash is the SHA-256 of the whole token,
-- which has 256 bits of entropy, and prefix is the short public part the token
-- starts with, by which a presented token is found before its hash is
-- compared in constant time.
CREATE TABLE api_tokens (
  prefix       TEXT    PRIMARY KEY,
  name         TEXT    NOT NULL CHECK (name <> ''),
  owner        TEXT    NOT NULL CHECK (owner <> ''),
  scopes       TEXT    NOT NULL DEFAULT '',
  secret_hash  BLOB    NOT NULL CHECK (length(secret_hash) = 32),
  created_at   INTEGER NOT NULL,
  last_used_at INTEGER,
  expires_at   INTEGER,
  revoked_at   INTEGER
) STRICT, WITHOUT ROWID;

-- A live token's name is unique, so a retried `token create` cannot mint a
-- second token under the same name; a revoked token frees its name.
CREATE UNIQUE INDEX idx_api_tokens_live_name ON api_tokens(name) WHERE revoked_at IS NULL;

-- owner_limits holds each owner's quotas; 0 means unlimited, and an owner
-- without a row has no limits.
CREATE TABLE owner_limits (
  owner         TEXT    PRIMARY KEY,
  max_sandboxes INTEGER NOT NULL DEFAULT 0 CHECK (max_sandboxes >= 0),
  max_cpu       REAL    NOT NULL DEFAULT 0 CHECK (max_cpu >= 0),
  max_memory_mb INTEGER NOT NULL DEFAULT 0 CHECK (max_memory_mb >= 0),
  max_ports     INTEGER NOT NULL DEFAULT 0 CHECK (max_ports >= 0),
  updated_at    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- audit_log is append-only: rows are never updated, and only the retention
-- sweep deletes them, oldest first.
CREATE TABLE audit_log (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  at         INTEGER NOT NULL,
  token_name TEXT    NOT NULL,
  owner      TEXT    NOT NULL,
  action     TEXT    NOT NULL,
  resource   TEXT    NOT NULL DEFAULT '',
  outcome    TEXT    NOT NULL,
  detail     TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX idx_audit_log_at ON audit_log(at);

CREATE TRIGGER audit_log_append_only BEFORE UPDATE ON audit_log
BEGIN
  SELECT RAISE(ABORT, 'audit_log is append-only');
END;
