-- 0019_volume_size: a volume has a size.
--
-- Volumes were unbounded: a sandbox writing into one filled the engine's
-- disk whatever the sandbox's own disk limit. size_mb is the most a volume
-- may hold, which the disk watcher enforces by stopping the sandboxes that
-- write into it. A volume made before this migration has 0, which reads as
-- the daemon's --volume-size-mb.
ALTER TABLE volumes ADD COLUMN size_mb INTEGER NOT NULL DEFAULT 0 CHECK (size_mb >= 0);
