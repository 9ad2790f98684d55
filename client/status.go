package client

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit/apitypes"
)

// Status is the daemon's own report (GET /v1/status; admin token).
type Status = apitypes.Status

// Status fetches the daemon's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var out Status
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/status", idempotent: true}, &out)
	return out, err
}
