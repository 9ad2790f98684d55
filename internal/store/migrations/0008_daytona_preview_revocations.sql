-- 0008_daytona_preview_revocations: signed preview URLs revoked before their
-- expiry (Daytona's expireSignedPreviewUrl).
--
-- A signed URL is stateless (its token carries sandbox, expiry and an HMAC),
-- so revoking one early needs a record the preview gate consults. The token
-- is the key, so revoking twice is one row. A row is useless once the token
-- has expired on its own (expires_at), and goes with its sandbox.
CREATE TABLE daytona_preview_revocations (
  token      TEXT    PRIMARY KEY CHECK (token <> ''),
  sandbox_id TEXT    NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  expires_at INTEGER NOT NULL,
  revoked_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX idx_daytona_preview_revocations_sandbox ON daytona_preview_revocations(sandbox_id);
