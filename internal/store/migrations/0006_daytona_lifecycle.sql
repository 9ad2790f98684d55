-- 0006_daytona_lifecycle: the disk a sandbox was allocated and its lifecycle
-- intervals, which Daytona's API sets and reports and the sweeper enforces.
--
-- Intervals are in minutes (the daemon's interval unit, shortened only in
-- tests). auto_stop_minutes: stop a running sandbox after that long without
-- activity, 0 = never. auto_archive_minutes: report a stopped sandbox as
-- archived after that long stopped, 0 = never. auto_delete_minutes: delete a
-- stopped sandbox that long after it stopped, -1 = never, 0 = on stop.
-- Rows made before this migration, and sandboxes of the other facades, keep
-- the defaults, which change nothing about their lifecycle.
--
-- last_activity_at is the last toolbox call, preview request or explicit
-- refresh (NULL = none since creation); stopped_at is when the sandbox last
-- stopped (NULL while it runs).
ALTER TABLE sandboxes ADD COLUMN disk_gb REAL NOT NULL DEFAULT 0 CHECK (disk_gb >= 0);
ALTER TABLE sandboxes ADD COLUMN auto_stop_minutes INTEGER NOT NULL DEFAULT 0 CHECK (auto_stop_minutes >= 0);
ALTER TABLE sandboxes ADD COLUMN auto_archive_minutes INTEGER NOT NULL DEFAULT 0 CHECK (auto_archive_minutes >= 0);
ALTER TABLE sandboxes ADD COLUMN auto_delete_minutes INTEGER NOT NULL DEFAULT -1 CHECK (auto_delete_minutes >= -1);
ALTER TABLE sandboxes ADD COLUMN last_activity_at INTEGER;
ALTER TABLE sandboxes ADD COLUMN stopped_at INTEGER;

-- The lifecycle sweep only looks at sandboxes with an interval to enforce.
CREATE INDEX idx_sandboxes_lifecycle ON sandboxes(state)
  WHERE auto_stop_minutes > 0 OR auto_delete_minutes >= 0;
