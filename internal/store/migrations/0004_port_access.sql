-- Who may reach a sandbox's ports other than its agent's, through the E2B
-- gateway and the preview proxy:
--   'exposed': only ports exposed through the API (native and Daytona creates);
--   'public':  every port (E2B creates, as E2B does by default);
--   'token':   every port, with the sandbox's traffic token in the
--              e2b-traffic-access-token header (E2B allowPublicTraffic false).
-- Rows made before this migration keep the stricter 'exposed'.
ALTER TABLE sandboxes ADD COLUMN port_access TEXT NOT NULL DEFAULT 'exposed'
  CHECK (port_access IN ('exposed', 'public', 'token'));
ALTER TABLE sandboxes ADD COLUMN traffic_token TEXT NOT NULL DEFAULT '';
