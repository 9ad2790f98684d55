-- 0002_network_policy: a sandbox's own egress policy, as JSON
-- {"egress": "public"|"none", "allow": [CIDR...], "deny": [CIDR...]}; '{}' means
-- the daemon's defaults. The firewall rules are derived from it on every start,
-- so the column is the durable intent and iptables only its current image.
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(network));
