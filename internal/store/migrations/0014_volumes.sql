-- 0014_volumes: named, owned storage that outlives sandboxes.
--
-- A volume's name is unique per owner when it has one: a retried or racing
-- create of one name lands on the one row the partial index lets exist. The
-- row is written in state creating before the engine volume is made, so a
-- daemon killed in between finds the row when it starts and removes what
-- was half made.
CREATE TABLE volumes (
  id          TEXT    PRIMARY KEY,
  owner       TEXT    NOT NULL,
  name        TEXT    NOT NULL DEFAULT '',
  engine_name TEXT    NOT NULL UNIQUE,
  state       TEXT    NOT NULL CHECK (state IN ('creating', 'ready', 'deleting')),
  node        TEXT    NOT NULL DEFAULT '',
  created_at  INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL
) STRICT;

CREATE UNIQUE INDEX volumes_owner_name ON volumes(owner, name) WHERE name <> '';

-- One row per mount, written with its sandbox's row. A mounted volume cannot
-- be deleted (RESTRICT), whatever its sandbox's state; the mounts go with
-- their sandbox.
CREATE TABLE sandbox_volumes (
  sandbox_id TEXT    NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  volume_id  TEXT    NOT NULL REFERENCES volumes(id) ON DELETE RESTRICT,
  path       TEXT    NOT NULL CHECK (path <> ''),
  read_only  INTEGER NOT NULL DEFAULT 0 CHECK (read_only IN (0, 1)),
  PRIMARY KEY (sandbox_id, path)
) STRICT, WITHOUT ROWID;

CREATE INDEX sandbox_volumes_volume ON sandbox_volumes(volume_id);
