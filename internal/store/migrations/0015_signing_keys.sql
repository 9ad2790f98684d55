-- 0015_signing_keys: the key a sandbox's signed file URLs are made with
-- (Daytona's sandbox.downloadUrl / uploadUrl): '' until first asked for,
-- replaced by a rotation, which invalidates every URL signed with the old
-- one. It is stored, not derived, so URLs outlive a daemon restart.
ALTER TABLE sandboxes ADD COLUMN signing_key TEXT NOT NULL DEFAULT '';
