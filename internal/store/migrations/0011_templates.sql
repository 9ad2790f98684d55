-- 0011_templates: templates owners build and create sandboxes from.
--
-- A template's name is unique per owner when it has one, like a sandbox's;
-- the partial index lets any number of anonymous templates exist. A build is
-- a row of its own so a template keeps its history (and its newest ready
-- image while a rebuild runs). At most one build of a template runs at a
-- time: two builds racing for one name cannot both be running, so the loser
-- is refused by the schema, not by a check that could race.
CREATE TABLE templates (
  id         TEXT    PRIMARY KEY,
  owner      TEXT    NOT NULL,
  name       TEXT    NOT NULL DEFAULT '',
  image      TEXT    NOT NULL DEFAULT '',
  build_id   TEXT    NOT NULL DEFAULT '',
  cpu        REAL    NOT NULL DEFAULT 0 CHECK (cpu >= 0),
  memory_mb  INTEGER NOT NULL DEFAULT 0 CHECK (memory_mb >= 0),
  start_cmd  TEXT    NOT NULL DEFAULT '',
  ready_cmd  TEXT    NOT NULL DEFAULT '',
  user       TEXT    NOT NULL DEFAULT '',
  workdir    TEXT    NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;

CREATE UNIQUE INDEX templates_owner_name ON templates(owner, name) WHERE name <> '';

CREATE TABLE template_builds (
  id           TEXT    PRIMARY KEY,
  template_id  TEXT    NOT NULL REFERENCES templates(id) ON DELETE CASCADE,
  state        TEXT    NOT NULL CHECK (state IN ('waiting', 'building', 'ready', 'error')),
  content_hash TEXT    NOT NULL DEFAULT '',
  definition   TEXT    NOT NULL DEFAULT '',
  dockerfile   TEXT    NOT NULL DEFAULT '',
  image        TEXT    NOT NULL DEFAULT '',
  error        TEXT    NOT NULL DEFAULT '',
  start_cmd    TEXT    NOT NULL DEFAULT '',
  ready_cmd    TEXT    NOT NULL DEFAULT '',
  user         TEXT    NOT NULL DEFAULT '',
  workdir      TEXT    NOT NULL DEFAULT '',
  cpu          REAL    NOT NULL DEFAULT 0,
  memory_mb    INTEGER NOT NULL DEFAULT 0,
  created_at   INTEGER NOT NULL,
  started_at   INTEGER,
  ended_at     INTEGER,
  CHECK (state <> 'ready' OR image <> '')
) STRICT;

CREATE INDEX template_builds_template ON template_builds(template_id, created_at);
CREATE UNIQUE INDEX template_builds_one_running ON template_builds(template_id) WHERE state = 'building';

-- A tag names one build of its template (E2B's name:tag); moving a tag is
-- replacing its row.
CREATE TABLE template_tags (
  template_id TEXT    NOT NULL REFERENCES templates(id) ON DELETE CASCADE,
  tag         TEXT    NOT NULL CHECK (tag <> ''),
  build_id    TEXT    NOT NULL REFERENCES template_builds(id) ON DELETE CASCADE,
  created_at  INTEGER NOT NULL,
  PRIMARY KEY (template_id, tag)
) STRICT, WITHOUT ROWID;
