package gateway

import (
	"fmt"
	"net/http"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api/route"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// serveFailedOver answers a request about a sandbox whose node failed: a
// lost one answers 410 except to its delete, which frees its id, name and
// hostnames cluster-wide; one being re-created asks the client to retry.
// The caller must see the sandbox (its owner, or an admin); anyone else is
// served locally, where it does not exist.
func (g *Gateway) serveFailedOver(w http.ResponseWriter, r *http.Request, local http.Handler, rt Target, p cluster.Placement, cfg Config) {
	if cfg.Authenticate == nil {
		local.ServeHTTP(w, r)
		return
	}
	pr, err := cfg.Authenticate(r)
	if err != nil || (!pr.Admin && pr.Owner != p.Owner) {
		local.ServeHTTP(w, r)
		return
	}
	if p.State == cluster.PlacementRecreating {
		w.Header().Set("Retry-After", "2")
		cfg.WriteError(w, r, route.Problem{Status: http.StatusServiceUnavailable, Code: apitypes.CodeServiceUnavailable,
			Message: "sandbox " + p.SandboxID + " is being re-created on node " + p.Node})
		return
	}
	lost := cfg.Lost
	if lost == nil {
		lost = func(w http.ResponseWriter, r *http.Request, p cluster.Placement, deleted bool) {
			if deleted {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			cfg.WriteError(w, r, fmt.Errorf("sandbox %s (%s): %w", p.SandboxID, p.Lost(), sandpit.ErrSandboxLost))
		}
	}
	if !rt.Root || r.Method != http.MethodDelete {
		lost(w, r, p, false)
		return
	}
	if err := g.cl.Replica().Delete(r.Context(), p.SandboxID); err != nil {
		w.Header().Set("Retry-After", "1")
		cfg.WriteError(w, r, fmt.Errorf("delete lost sandbox: %w", err))
		return
	}
	cfg.Logger.Info("cluster: deleted lost sandbox", "sandbox", p.SandboxID, "name", p.Name, "node", p.Node)
	lost(w, r, p, true)
}
