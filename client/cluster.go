package client

import (
	"context"
	"net/http"
)

// ClusterMember is one node of a cluster as `GET /v1/cluster/members` shows
// it: gossip's view (address, state, capacity) and its Raft role.
type ClusterMember struct {
	Name   string `json:"name"`
	Gossip string `json:"gossip"`
	State  string `json:"state"`
	Meta   struct {
		API     string `json:"api"`
		Raft    string `json:"raft"`
		Proxy   string `json:"proxy"`
		Running int    `json:"running"`
		Max     int    `json:"max"`
	} `json:"meta"`
	Voter  bool `json:"voter"`
	Leader bool `json:"leader"`
	// Draining: the member takes no new sandboxes (cluster drain).
	Draining bool `json:"draining"`
	// MaxSandboxes is the member's --max-sandboxes (0 = no cap).
	MaxSandboxes int `json:"max_sandboxes"`
	// Placements is how many sandboxes the cluster places on the member.
	Placements int `json:"placements"`
}

// ClusterStatus is one node's view of the cluster and the digest of its copy
// of the replicated index.
type ClusterStatus struct {
	Node         string `json:"node"`
	State        string `json:"state"`
	Leader       string `json:"leader"`
	Term         string `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	Digest       string `json:"digest"`
	Placements   int    `json:"placements"`
	Names        int    `json:"names"`
	Hostnames    int    `json:"hostnames"`
	Claims       int    `json:"claims"`
	// Draining names the drained nodes.
	Draining []string `json:"draining,omitempty"`
}

// ClusterMembers lists the members the daemon's node knows.
func (c *Client) ClusterMembers(ctx context.Context) ([]ClusterMember, error) {
	var out struct {
		Members []ClusterMember `json:"members"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/cluster/members", idempotent: true}, &out)
	return out.Members, err
}

// ClusterStatus returns the node's Raft state and index digest.
func (c *Client) ClusterStatus(ctx context.Context) (ClusterStatus, error) {
	var out ClusterStatus
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/cluster/status", idempotent: true}, &out)
	return out, err
}

// ClusterLeave makes the node leave the cluster and stop (admin only).
func (c *Client) ClusterLeave(ctx context.Context) error {
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/cluster/leave"}, nil)
	return err
}

// ClusterDrain stops (drain true) or restores (false) new placements on the
// named node; existing sandboxes keep running (admin only). An unknown node
// is a *APIError with status 404.
func (c *Client) ClusterDrain(ctx context.Context, node string, drain bool) error {
	body := map[string]any{"node": node, "drain": drain}
	// Setting a flag to a value is idempotent, so the call is safe to retry.
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/cluster/drain", body: body, idempotent: true}, nil)
	return err
}
