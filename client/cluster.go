package client

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/apitypes"
)

// ClusterMember is one node of a cluster as `GET /v1/cluster/members` shows
// it (apitypes holds the one definition, which the daemon writes).
type ClusterMember = apitypes.ClusterMember

// ClusterStatus is one node's view of the cluster and the digest of its copy
// of the replicated index.
type ClusterStatus = apitypes.ClusterNodeStatus

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
	body := apitypes.ClusterDrain{Node: node, Drain: drain}
	// Setting a flag to a value is idempotent, so the call is safe to retry.
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/cluster/drain", body: body, idempotent: true}, nil)
	return err
}
