package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api/route"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// fallbackKey carries, on a forwarded unkeyed create, its *fallback.
type fallbackKey struct{}

// fallback serves a forwarded unkeyed create locally when nothing of it
// reached the chosen owner: the dial failed, or the owner was confirmed
// dead before any connection to it was made.
type fallback struct {
	serve     func()
	connected atomic.Bool // a connection to the owner was obtained
}

// applies reports whether err, the forward's failure, left the owner
// untouched.
func (f *fallback) applies(err error) bool {
	return errors.Is(err, cluster.ErrDial) || !f.connected.Load() && errors.Is(err, cluster.ErrNodeDown)
}

// maxCreateBody bounds the create body the router reads to place a create.
const maxCreateBody = 1 << 20

// Config configures the forwarding of API requests to the node that
// owns their sandbox.
type Config struct {
	// Authenticate resolves the request's credential on this node; a request
	// that does not authenticate is never forwarded (this node refuses it).
	Authenticate func(r *http.Request) (sandpit.Principal, error)
	// Routes is the surfaces' route table: it says, for each request, how
	// the node that serves it is found (see route.Forwarding).
	Routes *Table
	// ListToken, when set, makes GET /v1/sandboxes list the whole cluster:
	// it returns the page token that continues after a row.
	ListToken func(created time.Time, id string) string
	// ListPosition reads a page token back into the row it continues after,
	// so that rows only the index knows (lost sandboxes) follow it too.
	ListPosition func(token string) (time.Time, string, error)
	// WriteError writes an error the gateway decided itself (no node can
	// take a create, the owner did not answer, a lost sandbox) in the shape
	// of the surface r belongs to, with the status of the API's Classify.
	// It is required: only the API layer maps domain errors to statuses,
	// and the gateway compiles no more of it than the route declarations.
	WriteError func(w http.ResponseWriter, r *http.Request, err error)
	// Lost answers a request about a lost sandbox in its surface's shape:
	// 410 sandbox_lost, or, when deleted is true, the surface's answer to a
	// delete that succeeded (the placement is gone by then). Nil answers in
	// the native shape.
	Lost func(w http.ResponseWriter, r *http.Request, p cluster.Placement, deleted bool)
	// TemplateNodes names, for a create from the template ref by the
	// principal of ctx, the only nodes that can run it (nil = any).
	TemplateNodes func(ctx context.Context, ref string) []string
	Logger        *slog.Logger
}

// API wraps the daemon's API: a request about a sandbox another node owns
// goes to that node, a create goes to the node placement picks, and
// everything else is served here.
func (g *Gateway) API(local http.Handler, cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = g.log
	}
	if cfg.WriteError == nil {
		// A programming error of the assembly, found by any test that
		// builds a gateway.
		panic("gateway: Config.WriteError is required")
	}
	transport := g.cl.Transport()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = pr.In.Header.Get(cluster.HeaderForwardedBy + "-To")
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(cluster.HeaderForwardedBy + "-To")
		},
		Transport: transport,
		// Streams (exec output, event streams) pass through as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			err = cluster.DownCause(r.Context(), err)
			cfg.Logger.Warn("cluster: forward failed", "path", r.URL.Path, "err", err)
			if fb, ok := r.Context().Value(fallbackKey{}).(*fallback); ok && fb.applies(err) {
				// Nothing reached the chosen owner: the create is made
				// here instead.
				fb.serve()
				return
			}
			// The client's retry (same key) will find the owner back, or
			// the cluster changed.
			w.Header().Set("Retry-After", "1")
			cfg.WriteError(w, r, route.Problem{Status: http.StatusServiceUnavailable, Code: apitypes.CodeOwnerUnreachable,
				Message: "the node that owns this sandbox did not answer: " + err.Error()})
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, forwarded := cluster.Forwarded(r.Context())
		rt, ok := cfg.Routes.Locate(r)
		if !ok {
			// No surface serves it: the surface answers it here.
			local.ServeHTTP(w, r)
			return
		}
		switch rt.Locate {
		case route.LocateList, route.LocateEvents:
			if !forwarded && r.Method == http.MethodGet && g.serveMerged(w, r, local, cfg, transport, rt) {
				return
			}
			local.ServeHTTP(w, r)
			return
		case route.LocateSandbox, route.LocateCreate:
		case route.LocateNode:
			if forwarded || rt.Node == "" || rt.Node == g.node {
				local.ServeHTTP(w, r)
				return
			}
		case route.LocateHeader:
			if rt.Sandbox == "" && !rt.Signed {
				local.ServeHTTP(w, r)
				return
			}
		default:
			local.ServeHTTP(w, r)
			return
		}
		if rt.Locate == route.LocateSandbox && rt.Sandbox == "" {
			local.ServeHTTP(w, r)
			return
		}
		anonymous := rt.Locate == route.LocateHeader
		var target string
		switch {
		case rt.Locate == route.LocateNode:
			target = rt.Node
		case rt.Signed:
			if forwarded {
				local.ServeHTTP(w, r)
				return
			}
			target = g.signedFilesOwner(r, local, &http.Client{Transport: transport})
			if target == "" || target == g.node {
				local.ServeHTTP(w, r)
				return
			}
		case rt.Locate == route.LocateCreate:
			if forwarded {
				// Placement already chose this node.
				local.ServeHTTP(w, r)
				return
			}
			var m cluster.Member
			body, err := io.ReadAll(io.LimitReader(r.Body, maxCreateBody+1))
			if err != nil || len(body) > maxCreateBody {
				// Too large for any create; let the surface refuse it.
				r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
				local.ServeHTTP(w, r)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			key := r.Header.Get("Idempotency-Key")
			if rt.Affinity != nil {
				r, key = rt.Affinity(r, body)
			}
			// A create from a template whose image only some nodes have
			// (no registry) goes to one of them.
			var only []string
			if rt.Template != nil && cfg.TemplateNodes != nil && cfg.Authenticate != nil {
				if ref := rt.Template(body); ref != "" {
					if p, aerr := cfg.Authenticate(r); aerr == nil {
						only = cfg.TemplateNodes(sandpit.WithPrincipal(r.Context(), p), ref)
					}
				}
			}
			// A create that mounts volumes goes to the node that holds
			// them; a volume no node holds is refused by this one.
			if rt.Volumes != nil && cfg.Authenticate != nil {
				if refs := rt.Volumes(body); len(refs) > 0 {
					if p, aerr := cfg.Authenticate(r); aerr == nil {
						if nodes := g.volumeNodes(r, local, p, transport, refs[0]); len(nodes) > 0 {
							only = nodes
						}
					}
				}
			}
			switch {
			case key != "" && len(only) > 0:
				m, err = g.cl.OwnerForKeyAmong(key, only)
			case key != "":
				// Every retry of a keyed create goes to the same owner,
				// whichever node it reaches, so that the owner's claim
				// decides them all; while that owner is down they wait.
				m, err = g.cl.OwnerForKey(key)
			case len(only) > 0:
				m, err = g.cl.PickOwnerAmong(only)
			default:
				m, err = g.cl.PickOwner()
			}
			if err != nil {
				// No node may take it: answer so here, rather than make it
				// on a node that is full or drained.
				cfg.WriteError(w, r, err)
				return
			}
			if key == "" {
				// Nothing pins an unkeyed create to its owner: if the owner
				// cannot be dialled, it is made here.
				orig := r
				fb := &fallback{serve: func() {
					orig.Body = io.NopCloser(bytes.NewReader(body))
					local.ServeHTTP(w, orig)
				}}
				ctx := httptrace.WithClientTrace(context.WithValue(r.Context(), fallbackKey{}, fb), &httptrace.ClientTrace{
					GotConn: func(httptrace.GotConnInfo) { fb.connected.Store(true) },
				})
				r = r.WithContext(ctx)
			}
			g.cl.Inflight(m.Name, 1)
			defer g.cl.Inflight(m.Name, -1)
			if m.Name == g.node {
				local.ServeHTTP(w, r)
				return
			}
			target = m.Name
		default:
			p, found := g.idx.Placement(rt.Sandbox)
			if !found && rt.NamesToo {
				p, found = g.idx.PlacementByName(rt.Sandbox)
			}
			if found && p.State != cluster.PlacementPlaced && p.State != cluster.PlacementReserved {
				g.serveFailedOver(w, r, local, rt, p, cfg)
				return
			}
			if !found || p.Node == "" || p.Node == g.node || anonymous && p.State != cluster.PlacementPlaced {
				local.ServeHTTP(w, r)
				return
			}
			target = p.Node
		}
		if forwarded {
			// One hop only: the forwarding node thought this node owns the
			// sandbox and this node thinks otherwise; the index is moving.
			cfg.WriteError(w, r, route.Problem{Status: http.StatusMisdirectedRequest, Code: apitypes.CodeMisdirected,
				Message: "sandbox is owned by " + target + ", not by this node"})
			return
		}
		pj := []byte(cluster.AnonymousPrincipal)
		if !anonymous {
			if cfg.Authenticate == nil {
				local.ServeHTTP(w, r)
				return
			}
			pr, err := cfg.Authenticate(r)
			if err != nil {
				local.ServeHTTP(w, r)
				return
			}
			pj, _ = json.Marshal(pr)
		}
		r = r.Clone(r.Context())
		// Only this node says what a forwarded request is: a client's
		// copies of the headers that mark preview traffic or a probe go.
		r.Header.Del(cluster.HeaderPreview)
		r.Header.Del(cluster.HeaderSignedProbe)
		r.Header.Set(cluster.HeaderForwardedBy, g.node)
		r.Header.Set(cluster.HeaderPrincipal, string(pj))
		r.Header.Set(cluster.HeaderClientAddr, r.RemoteAddr)
		r.Header.Set(cluster.HeaderForwardedBy+"-To", target)
		ctx, done := g.cl.UntilDown(r.Context(), target)
		defer done()
		proxy.ServeHTTP(w, r.WithContext(ctx))
	})
}

// volumeNodes asks every live node whether it holds the caller's volume ref
// (GET /v1/volumes/{ref} as the caller) and returns those that do.
func (g *Gateway) volumeNodes(r *http.Request, local http.Handler, p sandpit.Principal, transport http.RoundTripper, ref string) []string {
	q, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "/v1/volumes/"+url.PathEscape(ref), nil)
	if err != nil {
		return nil
	}
	q.Host = r.Host
	var nodes []string
	for _, a := range g.fanOut(q, local, p, &http.Client{Transport: transport}) {
		if a.Err == nil {
			nodes = append(nodes, a.Node)
		}
	}
	return nodes
}
