-- 0006_pool: the warm pool of started, ownerless sandbox containers.
--
-- A slot is one pooled container. Its id is the container's
-- sandpit.sandbox-id label, so the engine's view maps back to the row. A
-- create adopts a slot by writing its sandbox id into sandbox_id; the partial
-- unique index lets a sandbox hold at most one slot (a retried create cannot
-- adopt a second), and the claim only takes a row whose sandbox_id is NULL,
-- so no slot is ever adopted twice. Deleting the sandbox deletes its slot.
CREATE TABLE pool_slots (
  id           TEXT    PRIMARY KEY CHECK (id <> ''),
  pool_key     TEXT    NOT NULL CHECK (pool_key <> ''),
  image        TEXT    NOT NULL,
  agent_user   TEXT    NOT NULL DEFAULT '',
  container_id TEXT    NOT NULL,
  -- token is the pool-only agent token the container started with; only the
  -- daemon knows it, and adoption replaces it with the sandbox's own.
  token        TEXT    NOT NULL CHECK (token <> ''),
  cpu          REAL    NOT NULL DEFAULT 0,
  memory_mb    INTEGER NOT NULL DEFAULT 0,
  ready        INTEGER NOT NULL DEFAULT 0 CHECK (ready IN (0, 1)),
  sandbox_id   TEXT    REFERENCES sandboxes(id) ON DELETE CASCADE,
  created_at   INTEGER NOT NULL,
  adopted_at   INTEGER
) STRICT, WITHOUT ROWID;

CREATE UNIQUE INDEX idx_pool_slots_sandbox ON pool_slots(sandbox_id) WHERE sandbox_id IS NOT NULL;

-- Adoption takes the oldest ready free slot of a key.
CREATE INDEX idx_pool_slots_free ON pool_slots(pool_key, created_at) WHERE sandbox_id IS NULL AND ready = 1;
