// Package route holds the route declarations every HTTP surface makes and
// the cluster's gateway reads: the pattern, the action and Idempotency-Key
// contract it declares, and how the gateway finds the node that serves it.
// It is a leaf (it imports no domain operation, store or runtime) so that
// the gateway forwards routes from their declarations alone, without
// compiling what serves them.
package route

import (
	"encoding/json"
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
	// Keying says whether the route honours Idempotency-Key (api.Routes.HandleKeyed).
	Keying Keying
	// Forwarding says how a cluster's gateway finds the node that serves
	// the route; the zero value is the default its pattern implies (see
	// Locator). A surface sets it with api.Routes.Forward, next to the route.
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

// KeyMode says whether and how a route honours Idempotency-Key.
type KeyMode int

const (
	// NotKeyed: the header is ignored.
	NotKeyed KeyMode = iota
	// Keyed: the first completed answer is stored and replayed.
	Keyed
	// KeyedCreate: as Keyed, and the route makes a resource whose id is
	// chosen and recorded in the claim before anything is made (the handler
	// reads it with api.TargetID), so the retry of a crashed attempt makes it
	// under the same id rather than making a second one.
	KeyedCreate
	// KeyedByHandler: the handler reads the key itself (E2B's create, which
	// also merges identical creates by their fingerprint); the route is
	// keyed for the documentation, and the wrapper leaves it alone.
	KeyedByHandler
)

// Keying is a route's Idempotency-Key declaration.
type Keying struct {
	Mode KeyMode
	// Prefix goes before a KeyedCreate's chosen id (a template's "tpl-").
	Prefix string
}

// Problem is an answer the gateway decided itself (no node can take a
// create, the owner did not answer): the HTTP status, a stable machine code
// (one of apitypes' codes) and a human message. The surface's error
// renderer classifies it as api.Problem, which it converts to.
type Problem struct {
	Status  int
	Code    string
	Message string
}

// Error makes a Problem an error, so that the surface's renderer takes it
// as any other.
func (p Problem) Error() string { return p.Message }

// WriteJSON writes v with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":{"code":"internal","message":"encode response"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
