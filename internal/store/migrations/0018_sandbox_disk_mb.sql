-- 0018_sandbox_disk_mb: every sandbox carries its own disk limit.
--
-- disk_gb (0006) was Daytona's allocation, recorded and reported but never
-- enforced. disk_mb is the limit the daemon enforces (the engine's quota or
-- the disk watcher): a create stores the limit it asked for or the daemon's
-- default, so stats and get show what holds. A row from before this
-- migration keeps the Daytona allocation it recorded, in MiB; 0 reads as the
-- daemon's --disk-mb.
ALTER TABLE sandboxes ADD COLUMN disk_mb INTEGER NOT NULL DEFAULT 0 CHECK (disk_mb >= 0);
UPDATE sandboxes SET disk_mb = CAST(round(disk_gb * 1024) AS INTEGER) WHERE disk_gb > 0;
ALTER TABLE sandboxes DROP COLUMN disk_gb;
