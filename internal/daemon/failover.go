package daemon

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// answerLost answers a request about a sandbox lost with its cluster node in
// the shape of the surface it came through: 410 sandbox_lost (the one
// mapping in api.Classify), or, once its delete freed it, that surface's
// answer to a delete that succeeded.
func answerLost(w http.ResponseWriter, r *http.Request, p cluster.Placement, deleted bool) {
	path := r.URL.Path
	if deleted {
		if strings.HasPrefix(path, daytona.DefaultPrefix+"/") {
			api.WriteJSON(w, http.StatusOK, map[string]any{"id": p.SandboxID, "name": p.Name, "state": "destroyed", "desiredState": "destroyed"})
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeSurfaceProblem(w, r, fmt.Errorf("sandbox %s (%s): %w; delete it to free its name", p.SandboxID, p.Lost(), sandpit.ErrSandboxLost))
}
