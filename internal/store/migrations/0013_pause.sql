-- 0013_pause: pause modes and what a sandbox does at its deadline.
--
-- pause_mode is what a paused sandbox keeps: 'memory' (its processes are
-- frozen) or 'filesystem' (its container is stopped, its files kept); ''
-- unless paused. Rows paused before this migration were frozen, so they are
-- memory pauses.
--
-- on_timeout is the sweeper's action at end_at: 'kill' (delete, as before)
-- or 'pause', in memory mode when pause_keep_memory is 1, else filesystem.
-- auto_resume wakes a paused sandbox on the first request through the E2B
-- gateway or a preview URL.
--
-- timeout_seconds is the create's timeout, which a sandbox paused at its
-- deadline gets again when it resumes (0 = none).
--
-- archive_image is the image an archived sandbox's filesystem was committed
-- to; '' when not archived.
ALTER TABLE sandboxes ADD COLUMN pause_mode TEXT NOT NULL DEFAULT ''
  CHECK (pause_mode IN ('', 'memory', 'filesystem'));
ALTER TABLE sandboxes ADD COLUMN on_timeout TEXT NOT NULL DEFAULT 'kill'
  CHECK (on_timeout IN ('kill', 'pause'));
ALTER TABLE sandboxes ADD COLUMN pause_keep_memory INTEGER NOT NULL DEFAULT 1
  CHECK (pause_keep_memory IN (0, 1));
ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0
  CHECK (auto_resume IN (0, 1));
ALTER TABLE sandboxes ADD COLUMN timeout_seconds INTEGER NOT NULL DEFAULT 0
  CHECK (timeout_seconds >= 0);
ALTER TABLE sandboxes ADD COLUMN archive_image TEXT NOT NULL DEFAULT '';

UPDATE sandboxes SET pause_mode = 'memory' WHERE state = 'paused';
