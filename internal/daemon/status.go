package daemon

import (
	"context"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// statusHandler serves GET /v1/status to the admin: the version, the
// engine's answer to a ping, the store and its single writer's queue, and
// the warm pool's ready sandboxes and the cluster this daemon runs in (a
// cluster of one, today).
func statusHandler(cfg Config, started time.Time, auth *api.Auth, st *store.Store, rt *docker.Docker, svc *service.Service, disk apitypes.DiskStatus) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, err := auth.Authorize(r, api.BearerToken(r))
		if err == nil {
			if p, _ := sandpit.PrincipalFrom(r.Context()); !p.Admin {
				err = service.ErrForbidden
			}
		}
		if err != nil {
			api.WriteError(w, r, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		out := apitypes.Status{
			Version: cfg.Version,
			UptimeS: int64(time.Since(started).Seconds()),
			Router:  cfg.Router,
			Engine:  apitypes.EngineStatus{Name: "docker"},
			Store:   apitypes.StoreStatus{DataDir: st.Dir(), Sandboxes: map[string]int64{}},
			Cluster: apitypes.ClusterStatus{Node: cfg.Listen, Nodes: 1},
			Disk:    disk,
		}
		t0 := time.Now()
		if err := rt.Ping(ctx); err != nil {
			out.Engine.Error = err.Error()
		} else {
			out.Engine.OK = true
		}
		out.Engine.LatencyMS = float64(time.Since(t0).Microseconds()) / 1000
		if n, err := st.CountSandboxesByState(ctx); err == nil {
			for s, v := range n {
				out.Store.Sandboxes[string(s)] = int64(v)
			}
		}
		if svc.PoolEnabled() {
			out.Pool.Enabled = true
			if n, err := svc.PoolReady(ctx); err == nil {
				out.Pool.Ready = map[string]int64{}
				for img, v := range n {
					out.Pool.Ready[img] = int64(v)
				}
			}
		}
		ds := st.Stats()
		out.Store.WaitCount, out.Store.WaitSeconds = ds.WaitCount, ds.WaitDuration.Seconds()
		api.WriteJSON(w, http.StatusOK, out)
	})
}
