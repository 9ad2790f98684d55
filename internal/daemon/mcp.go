package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/mcp"
)

// mcpPath is where the API listener serves MCP over Streamable HTTP.
const mcpPath = "/mcp"

// mcpHandler is the MCP endpoint. Its tools call the daemon's own API
// handler in process, each with the token of the request that called
// them, so they are authenticated, scoped and made idempotent exactly as
// /v1 requests are (and, in a cluster, forwarded as they are).
func (d *daemon) mcpHandler() *mcp.HTTPHandler {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.handler.ServeHTTP(w, r) })
	return mcp.Handler(mcp.HTTPConfig{
		Version: d.cfg.Version,
		Logger:  d.log,
		API:     api,
		Verify: func(ctx context.Context, token string) (string, error) {
			p, err := d.auth.Principal(ctx, token)
			if errors.Is(err, sandpit.ErrUnauthorized) {
				return "", fmt.Errorf("%w: %v", mcp.ErrUnauthorized, err)
			}
			if err != nil {
				return "", err
			}
			return p.Owner, nil
		},
	})
}
