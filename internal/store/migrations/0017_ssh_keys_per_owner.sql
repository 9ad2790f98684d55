-- 0017_ssh_keys_per_owner: a public key is registered per owner.
--
-- 0016 made the fingerprint unique over every owner, so whoever registered
-- a public key first held it: another owner could register someone else's
-- public key (it is public) and lock its holder out, while the holder's
-- private key then logged in as the squatter. Now each owner registers the
-- keys they hold, the same key by several owners included; a login names
-- its sandbox, and is accepted only if the key is the sandbox owner's.
-- Registering the same key again (a retry) still lands on the owner's one
-- row, and a name is still unique per owner.
CREATE TABLE ssh_keys_new (
  fingerprint  TEXT    NOT NULL CHECK (fingerprint <> ''),
  owner        TEXT    NOT NULL CHECK (owner <> ''),
  name         TEXT    NOT NULL CHECK (name <> ''),
  key_type     TEXT    NOT NULL,
  public_key   TEXT    NOT NULL,
  created_at   INTEGER NOT NULL,
  last_used_at INTEGER,
  PRIMARY KEY (owner, fingerprint)
) STRICT, WITHOUT ROWID;

INSERT INTO ssh_keys_new SELECT fingerprint, owner, name, key_type, public_key, created_at, last_used_at FROM ssh_keys;
DROP TABLE ssh_keys;
ALTER TABLE ssh_keys_new RENAME TO ssh_keys;

CREATE UNIQUE INDEX ssh_keys_owner_name ON ssh_keys(owner, name);
-- A login looks its key up by fingerprint.
CREATE INDEX ssh_keys_fingerprint ON ssh_keys(fingerprint);
