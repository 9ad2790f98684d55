// Package gateway holds the HTTP side of a cluster that belongs to the
// surfaces: it reads the surfaces' own route tables to find, for a request,
// the sandbox whose owner must serve it. The Raft index, placement and the
// forwarding itself stay in internal/cluster; the surfaces (internal/api/...)
// declare a route's locator next to the route. It may import api and
// cluster; nothing below api imports it.
package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// Surface is one surface's routes as registered, with the prefix its mux is
// mounted under ("" when the patterns carry the full path).
type Surface struct {
	Mount  string
	Routes []api.Route
}

// Table finds a request's route among the surfaces' routes by the same
// pattern matching the surfaces' muxes use, so that it never disagrees with
// them about which route a request is.
type Table struct {
	mux *http.ServeMux
}

// Target is what a request's route says about where it is served.
type Target struct {
	// Sandbox is the id (or name) the route names; "" for a route served
	// where it arrives.
	Sandbox string
	// Root is true when the path names the sandbox itself (its GET, its
	// delete), not something inside it.
	Root bool

	matched bool
}

type targetKey struct{}

// NewTable builds the table of the surfaces' routes.
func NewTable(surfaces ...Surface) *Table {
	mux := http.NewServeMux()
	seen := map[string]bool{}
	for _, s := range surfaces {
		for _, rt := range s.Routes {
			pattern := mounted(s.Mount, rt.Pattern)
			if seen[pattern] {
				continue
			}
			seen[pattern] = true
			loc := rt.Locator()
			param := rt.SandboxParam()
			root := param != "" && strings.HasSuffix(pattern, "/{"+param+"}")
			mux.HandleFunc(pattern, func(_ http.ResponseWriter, r *http.Request) {
				out, _ := r.Context().Value(targetKey{}).(*Target)
				if out == nil {
					return
				}
				out.matched = true
				if loc == api.LocateSandbox {
					out.Sandbox, out.Root = r.PathValue(param), root
				}
			})
		}
	}
	return &Table{mux: mux}
}

func mounted(mount, pattern string) string {
	if mount == "" {
		return pattern
	}
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		return mount + pattern
	}
	return method + " " + mount + path
}

// Locate returns the sandbox r's route acts on (Sandbox "" for a route
// served where it arrives), or ok false when r matches no route; the cluster
// router then reads the sandbox from the path as before, so that a lost
// sandbox's unknown paths are still answered as lost.
func (t *Table) Locate(r *http.Request) (Target, bool) {
	var out Target
	probe := r.Clone(r.Context())
	probe = probe.WithContext(contextWith(probe, &out))
	probe.Body = http.NoBody
	t.mux.ServeHTTP(discard{}, probe)
	return out, out.matched
}

// discard is the response writer of a lookup, which writes nothing.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func contextWith(r *http.Request, out *Target) context.Context {
	return context.WithValue(r.Context(), targetKey{}, out)
}
