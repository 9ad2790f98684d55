-- 0009_owner_policy: per-sandbox defaults and caps of an owner, and the
-- private ranges the operator lets the owner's sandboxes open (a JSON array
-- of IPv4 CIDRs; '[]' is none, the default). 0 leaves the daemon's value.
ALTER TABLE owner_limits ADD COLUMN default_cpu REAL NOT NULL DEFAULT 0 CHECK (default_cpu >= 0);
ALTER TABLE owner_limits ADD COLUMN default_memory_mb INTEGER NOT NULL DEFAULT 0 CHECK (default_memory_mb >= 0);
ALTER TABLE owner_limits ADD COLUMN max_sandbox_cpu REAL NOT NULL DEFAULT 0 CHECK (max_sandbox_cpu >= 0);
ALTER TABLE owner_limits ADD COLUMN max_sandbox_memory_mb INTEGER NOT NULL DEFAULT 0 CHECK (max_sandbox_memory_mb >= 0);
ALTER TABLE owner_limits ADD COLUMN allow_private_cidrs TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(allow_private_cidrs));
