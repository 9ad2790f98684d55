package daemon

import (
	"context"
	"net/http"
	"net/http/pprof"

	"github.com/sandpit-dev/sandpit/api/openapi"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/e2b"
	"github.com/sandpit-dev/sandpit/internal/metrics"
	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// v1CreateScope is the base idempotency scope of a keyed /v1 create.
const v1CreateScope = "v1:POST /v1/sandboxes"

// newMetrics builds the daemon's collectors; both create scopes count their
// replays as creates.
func newMetrics() *metrics.Metrics { return metrics.New(v1CreateScope, e2b.Scope) }

// watchSources registers the figures read at scrape time: sandboxes by state
// and the single writer's wait from the store, routes from the router.
func watchSources(m *metrics.Metrics, st *store.Store, rtr router.Router, svc *service.Service) {
	src := metrics.Sources{
		SandboxesByState: func(ctx context.Context) (map[string]int, error) {
			n, err := st.CountSandboxesByState(ctx)
			out := make(map[string]int, len(n))
			for s, v := range n {
				out[string(s)] = v
			}
			return out, err
		},
		StoreStats:     st.Stats,
		ActivityWrites: st.ActivityWrites,
		RoutesByKind: func(ctx context.Context) (map[string]int, error) {
			rs, err := rtr.Routes(ctx)
			out := map[string]int{}
			for _, r := range rs {
				out[string(r.Kind)]++
			}
			return out, err
		},
	}
	if svc.PoolEnabled() {
		src.Pool = svc.PoolReady
	}
	m.Watch(src)
}

// metricsHandler serves /metrics: to the admin token only, unless public is
// set (a scraper on a trusted network without credentials).
func metricsHandler(m *metrics.Metrics, auth *api.Auth, public bool) http.Handler {
	h := m.Handler()
	if public {
		return h
	}
	return adminOnly(auth, "metrics need the admin token (or --metrics-public)", h)
}

// pprofHandler serves Go's runtime profiles (net/http/pprof) under
// /debug/pprof/, to the admin token only: a CPU profile of the daemon
// under load is how the proxy's per-request cost is taken apart, and a
// profile names code paths and costs CPU, which no tenant may ask for.
func pprofHandler(auth *api.Auth) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return adminOnly(auth, "profiles need the admin token", mux)
}

// adminOnly serves h to the admin token; anyone else gets 401 (no or a
// bad token) or 403 (a tenant's), with msg.
func adminOnly(auth *api.Auth, msg string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := auth.Principal(r.Context(), api.BearerToken(r))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandpit"`)
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		if !p.Admin {
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// v1RouteWrap is the /v1 route wrapper: it notes the route for the access
// log (outside the Idempotency-Key layer, which the routes declare).
func v1RouteWrap(pattern string, h http.HandlerFunc) http.Handler {
	return api.RouteNoting(pattern, h)
}

// openAPIHandler serves the /v1 contract as JSON. It needs no token: it is
// the same document anyone can read in the repository.
func openAPIHandler() (http.Handler, error) {
	doc, err := openapi.JSON()
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = w.Write(doc)
	}), nil
}
