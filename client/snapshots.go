package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sandpit-dev/sandpit/apitypes"
)

type (
	// SnapshotRequest is the body of a snapshot.
	SnapshotRequest = apitypes.SnapshotRequest
	// ForkRequest is the body of a fork.
	ForkRequest = apitypes.ForkRequest
	// ForkResult is one copy of a fork: its sandbox, or why it failed.
	ForkResult = apitypes.ForkResult
)

// Snapshot commits a sandbox's filesystem as a snapshot (a template of kind
// snapshot) and returns it once it is ready. The request carries an
// Idempotency-Key, so a retry makes no second snapshot.
func (c *Client) Snapshot(ctx context.Context, sandbox string, req SnapshotRequest) (Template, error) {
	var t Template
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(sandbox) + "/snapshots", body: req, idempotent: true, keyed: true}, &t)
	return t, err
}

// ListSnapshots lists the caller's snapshots, of one sandbox and one name
// when they are not "".
func (c *Client) ListSnapshots(ctx context.Context, sandbox, name string) ([]Template, error) {
	q := url.Values{}
	if sandbox != "" {
		q.Set("sandbox", sandbox)
	}
	if name != "" {
		q.Set("name", name)
	}
	p := "/v1/snapshots"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var out apitypes.ListSnapshotsResponse
	_, err := c.do(ctx, request{method: http.MethodGet, path: p, idempotent: true}, &out)
	return out.Snapshots, err
}

// DeleteSnapshot deletes a snapshot; it is refused while a sandbox runs
// from it.
func (c *Client) DeleteSnapshot(ctx context.Context, ref string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/snapshots/" + url.PathEscape(ref), idempotent: true, keyed: true}, nil)
	return err
}

// Fork makes copies of a sandbox from one snapshot of it. A retry (with the
// request's Idempotency-Key) answers with the same copies.
func (c *Client) Fork(ctx context.Context, sandbox string, req ForkRequest) ([]ForkResult, error) {
	var out apitypes.ForkResponse
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(sandbox) + "/fork", body: req, idempotent: true, keyed: true}, &out)
	return out.Forks, err
}
