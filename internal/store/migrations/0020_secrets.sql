-- 0020_secrets: an owner's secrets, kept for the egress proxy and never
-- given to a sandbox.
--
-- Only the sealed value is kept: AES-256-GCM under the key in the data
-- directory's secrets-key file, with the owner and the secret's id as the
-- additional data, so that a sealed value copied onto another row (another
-- owner's, another secret's) fails to open instead of leaking. A name is
-- unique per owner, so a create of a name the owner has is a retry (the same
-- value) or a conflict (another one), never a second secret. version counts
-- the values the secret has held; metadata is the owner's JSON object of
-- strings (E2B's wire carries one).
CREATE TABLE secrets (
  id         TEXT    PRIMARY KEY CHECK (id <> ''),
  owner      TEXT    NOT NULL CHECK (owner <> ''),
  name       TEXT    NOT NULL CHECK (name <> ''),
  sealed     BLOB    NOT NULL CHECK (length(sealed) > 0),
  metadata   TEXT    NOT NULL DEFAULT '{}',
  version    INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1),
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE UNIQUE INDEX secrets_owner_name ON secrets(owner, name);
