// Package gateway is a cluster node's HTTP front: it forwards each request
// to the node that must serve it, answers listings and event streams for the
// whole cluster, and hands previews to the owner's proxy. It reads the
// surfaces' own route tables (each surface declares, next to its routes, how
// a request finds its sandbox and how its listings merge: route.Forwarding),
// so a route added to a surface is forwarded without editing this package.
// The Raft index, membership, placement and the cluster port stay in
// internal/cluster. It may import api and cluster; nothing below the daemon
// imports it.
package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/api/route"
)

// Surface is one surface's routes as registered, with the prefix its mux is
// mounted under ("" when the patterns carry the full path).
type Surface struct {
	Mount  string
	Routes []route.Route
}

// Table finds a request's route among the surfaces' routes by the same
// pattern matching the surfaces' muxes use, so that it never disagrees with
// them about which route a request is.
type Table struct {
	mux *http.ServeMux
}

// Target is what a request's route says about where it is served.
type Target struct {
	// Forwarding is the route's declaration; its Locate is the effective
	// locator (never LocateDefault).
	route.Forwarding
	// Sandbox is the id (or name) the route names, from its path or its
	// header; "" for a route that names none.
	Sandbox string
	// Root is true when the path names the sandbox itself (its GET, its
	// delete), not something inside it.
	Root bool
	// Signed: a signed URL that names no sandbox (see route.Forwarding's
	// Signature).
	Signed bool
	// Node is the node a LocateNode route names ("" = here).
	Node string

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
			fw := rt.Forwarding
			fw.Locate = rt.Locator()
			param := rt.SandboxParam()
			root := param != "" && strings.HasSuffix(pattern, "/{"+param+"}")
			mux.HandleFunc(pattern, func(_ http.ResponseWriter, r *http.Request) {
				out, _ := r.Context().Value(targetKey{}).(*Target)
				if out == nil {
					return
				}
				out.matched, out.Forwarding = true, fw
				switch fw.Locate {
				case route.LocateSandbox:
					out.Sandbox, out.Root = r.PathValue(param), root
				case route.LocateHeader:
					out.Sandbox = r.Header.Get(fw.Header)
					out.Signed = out.Sandbox == "" && fw.Signature != "" && r.URL.Query().Get(fw.Signature) != ""
				case route.LocateNode:
					if fw.Node != nil {
						out.Node = fw.Node(r)
					}
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

// Locate returns what r's route says about where r is served, or ok false
// when r matches no route (it is served where it arrives).
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
