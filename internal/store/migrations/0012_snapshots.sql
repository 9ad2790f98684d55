-- 0012_snapshots: snapshots of sandboxes are templates whose image the
-- engine committed from a sandbox's container.
--
-- A snapshot is a template (E2B's snapshots are templates too: a sandbox is
-- created from one by its id and deleted through the template API), so it
-- shares the templates' names, owners, builds and tags, and the one-running-
-- build index keeps two snapshots racing for one name from both running.
-- kind tells them apart: 'build' templates are built from a definition,
-- 'snapshot' ones are committed from source_sandbox, and 'fork' ones are the
-- hidden snapshot a fork boots its copies from, removed when no sandbox runs
-- its image any more.
ALTER TABLE templates ADD COLUMN kind TEXT NOT NULL DEFAULT 'build' CHECK (kind IN ('build', 'snapshot', 'fork'));
ALTER TABLE templates ADD COLUMN source_sandbox TEXT NOT NULL DEFAULT '';

CREATE INDEX templates_source ON templates(source_sandbox) WHERE source_sandbox <> '';
CREATE INDEX sandboxes_image ON sandboxes(image);
