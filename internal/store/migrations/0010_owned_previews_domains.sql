-- 0010_owned_previews_domains: ports served only with a credential, and an
-- owner quota on custom domains.
--
-- A Daytona signed preview URL makes its port private: the plain preview
-- hosts of that port then need the port's preview token (Daytona's
-- x-daytona-preview-token header), and the signed URL is the other way in.
-- The row goes with its exposure (the foreign key cascades), so unexposing
-- the port ends the mark too. The token is made once, with the row, and a
-- second mark keeps it.
CREATE TABLE private_ports (
  sandbox_id TEXT    NOT NULL,
  port       INTEGER NOT NULL,
  token      TEXT    NOT NULL CHECK (token <> ''),
  created_at INTEGER NOT NULL,
  PRIMARY KEY (sandbox_id, port),
  FOREIGN KEY (sandbox_id, port) REFERENCES exposed_ports(sandbox_id, port) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;

-- max_domains bounds the custom hostnames over an owner's sandboxes; 0 means
-- unlimited, as the other limits.
ALTER TABLE owner_limits ADD COLUMN max_domains INTEGER NOT NULL DEFAULT 0 CHECK (max_domains >= 0);
