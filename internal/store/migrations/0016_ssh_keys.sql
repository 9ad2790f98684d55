-- 0016_ssh_keys: the public keys owners register for SSH into their
-- sandboxes.
--
-- The fingerprint is the primary key over every owner, not per owner: the
-- key an SSH client presents is all the daemon learns of who it is, so one
-- key must name one owner. Registering the same key again (a retry) lands on
-- the one row; another owner's registration of it is refused. A name is
-- unique per owner, so `sandpit ssh-key rm NAME` names one key.
CREATE TABLE ssh_keys (
  fingerprint  TEXT    PRIMARY KEY CHECK (fingerprint <> ''),
  owner        TEXT    NOT NULL CHECK (owner <> ''),
  name         TEXT    NOT NULL CHECK (name <> ''),
  key_type     TEXT    NOT NULL,
  public_key   TEXT    NOT NULL,
  created_at   INTEGER NOT NULL,
  last_used_at INTEGER
) STRICT, WITHOUT ROWID;

CREATE UNIQUE INDEX ssh_keys_owner_name ON ssh_keys(owner, name);

-- ssh_tokens are short-lived SSH credentials for one sandbox (POST
-- /v1/sandboxes/{id}/ssh-access): the token is the SSH user name, or the
-- password of the sandbox's user name. Like api_tokens, only the SHA-256
-- of the token is kept, found by its public prefix. They go with their
-- sandbox, and expired rows are removed as new ones are made.
CREATE TABLE ssh_tokens (
  prefix      TEXT    PRIMARY KEY,
  secret_hash BLOB    NOT NULL CHECK (length(secret_hash) = 32),
  owner       TEXT    NOT NULL CHECK (owner <> ''),
  sandbox_id  TEXT    NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  created_by  TEXT    NOT NULL DEFAULT '',
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX ssh_tokens_sandbox ON ssh_tokens(sandbox_id);
