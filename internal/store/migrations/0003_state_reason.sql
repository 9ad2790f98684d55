-- 0002_state_reason: why a sandbox is in its state. A sandbox whose container
-- died on its own is `stopped` with reason `exited`, `oom` or `killed`; one the
-- user stopped has no reason. The column is free text so a new reason needs no
-- migration.
ALTER TABLE sandboxes ADD COLUMN state_reason TEXT NOT NULL DEFAULT '';
