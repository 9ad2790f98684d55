package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/api/route"
)

// The route declarations live in the leaf package route, so that the
// cluster's gateway reads them without compiling the surfaces' domain; the
// surfaces name them through these aliases.
type (
	Route      = route.Route
	Forwarding = route.Forwarding
	NodePage   = route.NodePage
	Locator    = route.Locator
)

const (
	LocateDefault = route.LocateDefault
	LocateLocal   = route.LocateLocal
	LocateSandbox = route.LocateSandbox
	LocateCreate  = route.LocateCreate
	LocateList    = route.LocateList
	LocateEvents  = route.LocateEvents
	LocateHeader  = route.LocateHeader
	LocateNode    = route.LocateNode
)

// VolumeRefs is route.VolumeRefs.
func VolumeRefs(field, key string) func(body []byte) []string { return route.VolumeRefs(field, key) }

// TemplateField is route.TemplateField.
func TemplateField(field string) func(body []byte) string { return route.TemplateField(field) }

// Routes collects a surface's routes as it registers them on its mux.
type Routes struct {
	mux  *http.ServeMux
	list []Route
	// declared are routes for the gateway only: paths the surface serves
	// without a registered route (a subtree it dispatches itself, the
	// unknown paths under a sandbox, which a lost sandbox answers).
	declared []Route
	namesToo bool
	// deny writes the surface's own error shape for a refused action.
	deny func(http.ResponseWriter, *http.Request, error)
	// wrap, when set, wraps each handler (the native API's access to the
	// matched pattern for OpenAPI checks and metrics).
	wrap func(pattern string, h http.HandlerFunc) http.Handler
	// mount is put before each pattern's path on the mux (a facade mounted
	// under a prefix declares its routes relative to it).
	mount string
	// keyed wraps the handler of each keyed route in the surface's
	// Idempotency-Key layer (nil: the header is ignored).
	keyed KeyWrapper
}

// Keyed makes the registry run every route registered with HandleKeyed
// through k; it must come before the routes are registered.
func (rs *Routes) Keyed(k KeyWrapper) *Routes {
	rs.keyed = k
	return rs
}

// Mount makes the registry put prefix before every pattern's path on the
// mux; the route list keeps the patterns as declared.
func (rs *Routes) Mount(prefix string) *Routes {
	rs.mount = prefix
	return rs
}

// NamesToo says that the surface's sandbox wildcards take a sandbox's name
// as well as its id.
func (rs *Routes) NamesToo() *Routes {
	rs.namesToo = true
	return rs
}

// Forward sets how a cluster's gateway locates the already registered route
// pattern.
func (rs *Routes) Forward(pattern string, f Forwarding) {
	for i := range rs.list {
		if rs.list[i].Pattern == pattern {
			f.NamesToo = f.NamesToo || rs.list[i].NamesToo
			rs.list[i].Forwarding = f
			return
		}
	}
	// A surface forwarding a route it never registered is a programming
	// error, found by any test that builds the surface.
	panic("api: Forward of unregistered route " + pattern)
}

// Declare adds a route for the gateway only, which the surface serves by
// other means than a registered route; it has no action of its own (the
// surface checks its requests where it serves them).
func (rs *Routes) Declare(pattern string, f Forwarding) {
	rt := Route{Pattern: pattern}
	f.NamesToo = f.NamesToo || rs.namesToo || rt.SandboxParam() == "idOrName"
	rt.Forwarding = f
	rs.declared = append(rs.declared, rt)
}

// Forwarded returns every route the gateway reads: the registered ones and
// the declared ones.
func (rs *Routes) Forwarded() []Route {
	return append(rs.List(), rs.declared...)
}

func (rs *Routes) prefix(pattern string) string {
	if rs.mount == "" {
		return pattern
	}
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		return rs.mount + pattern
	}
	return method + " " + rs.mount + path
}

// NewRoutes returns a registry over mux. deny renders a refusal (it receives
// an error wrapping sandpit.ErrForbidden).
func NewRoutes(mux *http.ServeMux, deny func(http.ResponseWriter, *http.Request, error), wrap func(pattern string, h http.HandlerFunc) http.Handler) *Routes {
	if wrap == nil {
		wrap = func(_ string, f http.HandlerFunc) http.Handler { return f }
	}
	return &Routes{mux: mux, deny: deny, wrap: wrap}
}

// Handle registers pattern, whose handler runs only for a principal that
// may perform a.
func (rs *Routes) Handle(pattern string, a sandpit.Action, f http.HandlerFunc) {
	rs.register(Route{Pattern: pattern, Action: a}, f)
}

// HandleKeyed registers pattern as Handle does, as a route that honours
// Idempotency-Key the way k says.
func (rs *Routes) HandleKeyed(pattern string, a sandpit.Action, k Keying, f http.HandlerFunc) {
	rs.register(Route{Pattern: pattern, Action: a, Keying: k}, f)
}

// HandleResolved registers pattern whose action resolve decides per
// request; strongest is the most a request can need (for documentation),
// note says how it is decided.
func (rs *Routes) HandleResolved(pattern string, strongest sandpit.Action, note string, resolve func(*http.Request) sandpit.Action, f http.HandlerFunc) {
	rs.register(Route{Pattern: pattern, Action: strongest, Resolve: resolve, Note: note}, f)
}

func (rs *Routes) register(rt Route, f http.HandlerFunc) {
	rt.NamesToo = rs.namesToo || rt.SandboxParam() == "idOrName"
	rs.list = append(rs.list, rt)
	if rs.keyed != nil && rt.Keying.Mode != NotKeyed {
		f = rs.keyed(rt, f)
	}
	inner := rs.wrap(rt.Pattern, f)
	// The check comes before the wrapper, so that a refused request claims
	// no idempotency key and records nothing.
	guarded := func(w http.ResponseWriter, r *http.Request) {
		a := rt.Action
		if rt.Resolve != nil {
			a = rt.Resolve(r)
		}
		if err := Permit(r.Context(), a); err != nil {
			rs.deny(w, r, err)
			return
		}
		inner.ServeHTTP(w, r)
	}
	rs.mux.HandleFunc(rs.prefix(rt.Pattern), guarded)
}

// List returns the registered routes in registration order.
func (rs *Routes) List() []Route { return append([]Route(nil), rs.list...) }

// Permit returns nil when the principal of ctx may perform a, else an error
// wrapping sandpit.ErrForbidden that names the scope it would need. A
// context without a principal is the daemon itself.
func Permit(ctx context.Context, a sandpit.Action) error {
	p, ok := sandpit.PrincipalFrom(ctx)
	if !ok || p.May(a) {
		return nil
	}
	return fmt.Errorf("%w: this token may not %s (that needs scope %s)", sandpit.ErrForbidden, describe(a), ScopeNeeded(a))
}

// ScopeNeeded is the narrowest scope that grants a.
func ScopeNeeded(a sandpit.Action) string {
	for _, s := range []string{sandpit.ScopeSandboxesRead, sandpit.ScopeSandboxesWrite, sandpit.ScopeAdmin} {
		if sandpit.ScopeGrants(s, a) {
			return s
		}
	}
	return sandpit.ScopeAdmin
}

func describe(a sandpit.Action) string {
	switch a {
	case sandpit.ActionRead:
		return "read sandboxes"
	case sandpit.ActionReadFiles:
		return "read files in sandboxes"
	case sandpit.ActionWriteFiles:
		return "write files in sandboxes"
	case sandpit.ActionExecute:
		return "run code in sandboxes"
	case sandpit.ActionExpose:
		return "expose sandbox ports"
	case sandpit.ActionManage:
		return "create, change or delete sandboxes"
	}
	return strings.ReplaceAll(string(a), "-", " ")
}
