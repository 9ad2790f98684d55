package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/sandpit-dev/sandpit"
)

// Route is one pattern a surface serves and the action it performs. Every
// surface registers its routes through a Routes, so a route cannot be added
// without saying what it does, and the scope table in docs/tokens.md is
// checked against the registered list.
type Route struct {
	Pattern string
	// Action is what the route does; for a route whose action depends on
	// the request (the agent passthrough), Resolve decides and Action is
	// the strongest action it can resolve to.
	Action  sandpit.Action
	Resolve func(*http.Request) sandpit.Action `json:"-"`
	// Note says, for the documentation, how Resolve decides.
	Note string
	// Keying says whether the route honours Idempotency-Key (HandleKeyed).
	Keying Keying
	// Forwarding says how a cluster's gateway finds the node that serves
	// the route; the zero value is the default its pattern implies (see
	// Locator). A surface sets it with Routes.Forward, next to the route.
	Forwarding `json:"-"`
}

// Forwarding is what a cluster's gateway needs to know of a route to send
// its requests to the node that must serve them. The gateway reads nothing
// else: a route a surface adds is forwarded from its declaration alone.
type Forwarding struct {
	Locate Locator
	// NamesToo: the route's sandbox wildcard also takes the sandbox's name
	// (the native API accepts either; Daytona's {idOrName} says so itself).
	NamesToo bool
	// Header names the request header that names the sandbox
	// (LocateHeader).
	Header string
	// Signature names the query parameter of a signed URL, which names no
	// sandbox (LocateHeader): with it and without Header, the node whose
	// sandbox signed the URL is found by asking every node.
	Signature string
	// Affinity, on a LocateCreate route, names the create so that its
	// duplicates (its retries, the same body sent twice) meet on one node,
	// whose idempotency claim decides them; "" lets the create go anywhere.
	// It may return r with what it decoded of body in its context, so that
	// the surface's handler on this node does not decode body again. Nil
	// names a create by its Idempotency-Key header alone.
	Affinity func(r *http.Request, body []byte) (*http.Request, string)
	// Merge, on a LocateList route, writes the whole cluster's answer from
	// every live node's answer to the same request. Nil on the native
	// listing, whose merge the gateway does itself (it adds the sandboxes
	// lost with their node, which only the cluster's index knows).
	Merge func(w http.ResponseWriter, r *http.Request, pages []NodePage)
	// Ask is added to the request each node answers for Merge (what it
	// needs beyond the public answer).
	Ask http.Header
	// Node, on a LocateNode route, names the node that serves the request
	// ("" = the node it reached).
	Node func(r *http.Request) string
	// Template, on a LocateCreate route, names the template the create's
	// body asks for ("" = none), so that placement can send it to the
	// nodes that have its image.
	Template func(body []byte) string
	// Volumes, on a LocateCreate route, names the volumes the create's body
	// mounts (by name or id), so that placement can send it to the node
	// that holds them: a volume lives on one node.
	Volumes func(body []byte) []string
}

// VolumeRefs returns a Forwarding.Volumes that reads the volumes a create's
// JSON body mounts: the string key of each object of its top-level array
// field.
func VolumeRefs(field, key string) func(body []byte) []string {
	return func(body []byte) []string {
		var req map[string]json.RawMessage
		if json.Unmarshal(body, &req) != nil {
			return nil
		}
		var mounts []map[string]json.RawMessage
		if json.Unmarshal(req[field], &mounts) != nil {
			return nil
		}
		var refs []string
		for _, m := range mounts {
			var ref string
			if json.Unmarshal(m[key], &ref) == nil && ref != "" {
				refs = append(refs, ref)
			}
		}
		return refs
	}
}

// TemplateField returns a Forwarding.Template that reads the template a
// create's JSON body names in its top-level string field; a body that
// also names an image names no template.
func TemplateField(field string) func(body []byte) string {
	return func(body []byte) string {
		var req map[string]json.RawMessage
		if json.Unmarshal(body, &req) != nil {
			return ""
		}
		var ref, image string
		_ = json.Unmarshal(req["image"], &image)
		if json.Unmarshal(req[field], &ref) != nil || image != "" {
			return ""
		}
		return ref
	}
}

// NodePage is one node's 200 answer to a listing the gateway asked every
// node for.
type NodePage struct {
	Node   string
	Header http.Header
	Body   []byte
}

// Locator says how a cluster's gateway finds the node a route's request
// must be served on. Each surface declares it next to its route, so a route
// added to a surface is forwarded without teaching the gateway about it.
type Locator int

const (
	// LocateDefault is the zero value: a route whose path has an {id}
	// (or {idOrName}) wildcard acts on the sandbox it names (LocateSandbox); any other is
	// served where it arrives (LocateLocal).
	LocateDefault Locator = iota
	// LocateLocal serves the route on the node the request reached.
	LocateLocal
	// LocateSandbox serves the route on the node that owns the sandbox
	// named by the path value SandboxParam ({id}, Daytona's {idOrName}).
	LocateSandbox
	// LocateCreate places a create: on the node its Affinity names, else on
	// the node with the most room.
	LocateCreate
	// LocateList answers a listing for the whole cluster (Merge).
	LocateList
	// LocateEvents answers an event stream for the whole cluster: every
	// node's stream, merged one event at a time.
	LocateEvents
	// LocateHeader serves the route on the node that owns the sandbox the
	// request header Header names (or that signed the URL, see Signature).
	// Such a route takes no API credential (the sandbox's own token or the
	// URL's signature authenticates it), so it is forwarded as the zero
	// principal.
	LocateHeader
	// LocateNode serves the route on the node its Node function names
	// (a template build's status and log, on the node that runs it).
	LocateNode
)

// Locator is the route's effective locator: the declared one, or the
// default its pattern implies.
func (rt Route) Locator() Locator {
	if rt.Locate != LocateDefault {
		return rt.Locate
	}
	if rt.SandboxParam() != "" {
		return LocateSandbox
	}
	return LocateLocal
}

// SandboxParam is the path wildcard of the route's pattern that names its
// sandbox, or "" when it names none.
func (rt Route) SandboxParam() string {
	_, path, ok := strings.Cut(rt.Pattern, " ")
	if !ok {
		path = rt.Pattern
	}
	// The wildcards that name a sandbox, by surface: the native API's and
	// E2B's {id}, Daytona's {idOrName}.
	for _, p := range []string{"id", "idOrName"} {
		if strings.Contains(path, "{"+p+"}") {
			return p
		}
	}
	return ""
}

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
