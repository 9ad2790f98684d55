package v1

import (
	"context"
	"database/sql"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// StatusSource is what GET /v1/status reports on: the daemon's own settings,
// read once, and the engine, the store and the warm pool, asked at every
// request. The daemon fills it in, so that this package needs neither the
// engine's nor the store's package.
type StatusSource struct {
	Version string
	Router  string
	// Node is this daemon's API address, the node of its cluster of one.
	Node    string
	Started time.Time
	DataDir string
	Disk    apitypes.DiskStatus
	// PingEngine asks the container engine whether it answers.
	PingEngine func(ctx context.Context) error
	// SandboxesByState and StoreStats read the store and its single
	// writer's queue.
	SandboxesByState func(ctx context.Context) (map[sandpit.State]int, error)
	StoreStats       func() sql.DBStats
	// PoolReady counts the warm pool's ready sandboxes by image; nil when
	// the daemon runs no pool.
	PoolReady func(ctx context.Context) (map[string]int, error)
	// Cluster describes the cluster this node belongs to; nil on a daemon
	// without --cluster (a cluster of one).
	Cluster func() apitypes.ClusterStatus
	// AwaitedTemplates are the daemon's templates whose image is not built
	// yet, with their builds' progress.
	AwaitedTemplates func() map[string]service.AwaitedTemplate
	// Pause says what a memory pause does under the daemon's runtime.
	Pause apitypes.PauseStatus
}

// StatusHandler serves GET /v1/status to the admin: the version, the
// engine's answer to a ping, the store and its single writer's queue, and
// the warm pool's ready sandboxes and the cluster this daemon runs in (a
// cluster of one, today). It is mounted beside the /v1 handler rather than
// among its routes, so it is no scope of GET /v1/scopes and answers only
// the admin token.
func StatusHandler(auth *api.Auth, src StatusSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, err := auth.Authorize(r, api.BearerToken(r))
		if err == nil {
			if p, _ := sandpit.PrincipalFrom(r.Context()); !p.Admin {
				err = sandpit.ErrForbidden
			}
		}
		if err != nil {
			api.WriteError(w, r, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		out := apitypes.Status{
			Version: src.Version,
			UptimeS: int64(time.Since(src.Started).Seconds()),
			Router:  src.Router,
			Engine:  apitypes.EngineStatus{Name: "docker"},
			Store:   apitypes.StoreStatus{DataDir: src.DataDir, Sandboxes: map[string]int64{}},
			Cluster: apitypes.ClusterStatus{Node: src.Node, Nodes: 1},
			Disk:    src.Disk,
			Pause:   src.Pause,
		}
		if src.Cluster != nil {
			out.Cluster = src.Cluster()
		}
		if src.AwaitedTemplates != nil {
			for name, a := range src.AwaitedTemplates() {
				if out.AwaitedTemplates == nil {
					out.AwaitedTemplates = map[string]string{}
				}
				out.AwaitedTemplates[name] = a.Image
				if a.Building {
					if out.AwaitedBuilds == nil {
						out.AwaitedBuilds = map[string]string{}
					}
					out.AwaitedBuilds[name] = a.Progress
				}
			}
		}
		t0 := time.Now()
		if err := src.PingEngine(ctx); err != nil {
			out.Engine.Error = err.Error()
		} else {
			out.Engine.OK = true
		}
		out.Engine.LatencyMS = float64(time.Since(t0).Microseconds()) / 1000
		if n, err := src.SandboxesByState(ctx); err == nil {
			for s, v := range n {
				out.Store.Sandboxes[string(s)] = int64(v)
			}
		}
		if src.PoolReady != nil {
			out.Pool.Enabled = true
			if n, err := src.PoolReady(ctx); err == nil {
				out.Pool.Ready = map[string]int64{}
				for img, v := range n {
					out.Pool.Ready[img] = int64(v)
				}
			}
		}
		ds := src.StoreStats()
		out.Store.WaitCount, out.Store.WaitSeconds = ds.WaitCount, ds.WaitDuration.Seconds()
		api.WriteJSON(w, http.StatusOK, out)
	})
}
