package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
)

// Headers of a request one node forwards to another over the cluster port.
// They are read only on the cluster port, where the TLS handshake has proved
// the sender holds the cluster key; on the public API they mean nothing.
const (
	// HeaderForwardedBy names the node that forwarded the request. A node
	// that receives a forwarded request for a sandbox it does not own
	// answers 421 instead of forwarding it again.
	HeaderForwardedBy = "Sandpit-Forwarded-By"
	// HeaderPrincipal carries the principal the forwarding node
	// authenticated, as JSON; the owner acts as that principal.
	HeaderPrincipal = "Sandpit-Principal"
)

type forwardedKey struct{}

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
	return errors.Is(err, errDial) || !f.connected.Load() && errors.Is(err, errNodeDown)
}

// errDial marks a forward that never reached the target node.
var errDial = errors.New("cannot reach node")

// maxCreateBody bounds the create body the router reads to place a create.
const maxCreateBody = 1 << 20

// Forwarded returns the principal a forwarded request carries, when ctx is
// a request's that arrived on the cluster port.
func Forwarded(ctx context.Context) (sandpit.Principal, bool) {
	p, ok := ctx.Value(forwardedKey{}).(sandpit.Principal)
	return p, ok
}

// RouterConfig configures the forwarding of API requests to the node that
// owns their sandbox.
type RouterConfig struct {
	// Authenticate resolves the request's credential on this node; a request
	// that does not authenticate is never forwarded (this node refuses it).
	Authenticate func(r *http.Request) (sandpit.Principal, error)
	// AffinityKey names a create that must meet its duplicates on one node
	// (its Idempotency-Key, or a facade's fingerprint of the body), or
	// returns "" for a create that may go anywhere. Nil uses the
	// Idempotency-Key header alone.
	AffinityKey func(r *http.Request, body []byte) string
	// ListToken, when set, makes GET /v1/sandboxes list the whole cluster:
	// it returns the page token that continues after a row.
	ListToken func(created time.Time, id string) string
	// ListPosition reads a page token back into the row it continues after,
	// so that rows only the index knows (lost sandboxes) follow it too.
	ListPosition func(token string) (time.Time, string, error)
	// Refuse writes an error in the shape of the surface r belongs to; the
	// router uses it when no node can take a create. Nil writes the native
	// shape.
	Refuse func(w http.ResponseWriter, r *http.Request, err error)
	// Lists, when set, makes the facades' listings answer for the whole
	// cluster too (see FacadeList).
	Lists []FacadeList
	// Lost answers a request about a lost sandbox in its surface's shape:
	// 410 sandbox_lost, or, when deleted is true, the surface's answer to a
	// delete that succeeded (the placement is gone by then). Nil answers in
	// the native shape.
	Lost func(w http.ResponseWriter, r *http.Request, p Placement, deleted bool)
	// Locate, when set, names the sandbox a request acts on from the
	// surfaces' own route tables (see internal/gateway): a surface path
	// whose route does not name a sandbox is served here, and one that does
	// goes to that sandbox's owner; matched is false for a request no route
	// matches, whose sandbox is read from the path. Nil reads every
	// request's sandbox from the path.
	Locate func(r *http.Request) (sandbox string, root bool, matched bool)
	Logger *slog.Logger
}

// route is what one request is about.
type route struct {
	list      bool   // the native listing: merged from every node
	create    bool   // a create: placed by capacity
	sandbox   string // id or name of the sandbox it acts on
	byNameToo bool   // the surface also accepts a name where the id goes
	// anonymous: the surface takes no API credential (the E2B sandbox
	// gateway, which the sandbox's agent authenticates), so the request is
	// forwarded as the zero principal rather than refused here.
	anonymous bool
	// signedFiles: an E2B signed file URL, which names no sandbox; the
	// node whose sandbox made the signature is found by asking.
	signedFiles bool
	root        bool // the path names the sandbox itself (its delete, its GET)
}

// headerE2BSandboxID names the sandbox of an E2B gateway call.
const headerE2BSandboxID = "E2b-Sandbox-Id"

// classify finds the sandbox a request acts on from its path. Paths it does
// not know are served where they arrive.
func classify(r *http.Request) (route, bool) {
	p := r.URL.Path
	switch {
	case p == "/e2b/envd" || strings.HasPrefix(p, "/e2b/envd/") || p == "/files" && r.Header.Get(headerE2BSandboxID) != "":
		// The E2B SDK's agent calls through E2B_SANDBOX_URL (and its file
		// calls at the origin's root) name their sandbox in a header.
		id := r.Header.Get(headerE2BSandboxID)
		return route{sandbox: id, anonymous: true}, id != ""
	case p == "/files" && r.URL.Query().Get("signature") != "":
		return route{signedFiles: true, anonymous: true}, true
	case strings.HasPrefix(p, "/v1/sandboxes"):
		rest := strings.TrimPrefix(p, "/v1/sandboxes")
		if rest == "" || rest == "/" {
			if r.Method == http.MethodGet {
				return route{list: true}, true
			}
			return route{create: r.Method == http.MethodPost}, r.Method == http.MethodPost
		}
		id, more, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
		return route{sandbox: id, byNameToo: true, root: more == ""}, id != ""
	case strings.HasPrefix(p, "/daytona/sandbox"):
		rest := strings.TrimPrefix(p, "/daytona/sandbox")
		if rest == "" || rest == "/" {
			return route{create: r.Method == http.MethodPost}, r.Method == http.MethodPost
		}
		id, more, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
		return route{sandbox: id, byNameToo: true, root: more == ""}, id != ""
	case strings.HasPrefix(p, "/daytona/toolbox/"):
		id, _, _ := strings.Cut(strings.TrimPrefix(p, "/daytona/toolbox/"), "/")
		return route{sandbox: id}, id != ""
	case strings.HasPrefix(p, "/e2b/"):
		rest := strings.TrimPrefix(p, "/e2b")
		rest = strings.TrimPrefix(rest, "/v2")
		if !strings.HasPrefix(rest, "/sandboxes") {
			return route{}, false
		}
		rest = strings.TrimPrefix(rest, "/sandboxes")
		if rest == "" || rest == "/" {
			return route{create: r.Method == http.MethodPost}, r.Method == http.MethodPost
		}
		id, more, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
		return route{sandbox: id, root: more == ""}, id != ""
	}
	return route{}, false
}

// Router wraps the daemon's API: a request about a sandbox another node owns
// goes to that node, a create goes to the node placement picks, and
// everything else is served here.
func (c *Cluster) Router(local http.Handler, cfg RouterConfig) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = c.log
	}
	transport := c.transport()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = pr.In.Header.Get(HeaderForwardedBy + "-To")
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(HeaderForwardedBy + "-To")
		},
		Transport: transport,
		// Streams (exec output, event streams) pass through as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			err = downCause(r.Context(), err)
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
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{
				"code": apitypes.CodeOwnerUnreachable, "message": "the node that owns this sandbox did not answer: " + err.Error()}})
		},
	}
	refuse := cfg.Refuse
	if refuse == nil {
		refuse = func(w http.ResponseWriter, _ *http.Request, err error) {
			w.Header().Set("Retry-After", "5")
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{
				"code": apitypes.CodeNoCapacity, "message": err.Error()}})
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, forwarded := Forwarded(r.Context())
		if !forwarded && r.Method == http.MethodGet &&
			(c.serveFacadeList(w, r, local, cfg, transport) || c.serveEvents(w, r, local, cfg, transport)) {
			return
		}
		rt, ok := classify(r)
		if ok && cfg.Locate != nil && rt.sandbox != "" && !rt.anonymous {
			// The surface's route, not the path's shape, says which
			// sandbox the request is about; a path no route matches keeps
			// the path's reading.
			if id, root, matched := cfg.Locate(r); matched {
				rt.sandbox, rt.root, ok = id, root, id != ""
			}
		}
		if !ok {
			local.ServeHTTP(w, r)
			return
		}
		var target string
		switch {
		case rt.signedFiles:
			if forwarded {
				local.ServeHTTP(w, r)
				return
			}
			target = c.signedFilesOwner(r, local, &http.Client{Transport: transport})
			if target == "" || target == c.cfg.NodeName {
				local.ServeHTTP(w, r)
				return
			}
		case rt.list:
			if forwarded || cfg.ListToken == nil || cfg.Authenticate == nil {
				local.ServeHTTP(w, r)
				return
			}
			p, err := cfg.Authenticate(r)
			if err != nil {
				local.ServeHTTP(w, r)
				return
			}
			c.listAll(w, r, local, p, &http.Client{Transport: transport}, cfg.ListToken, cfg.ListPosition)
			return
		case rt.create:
			if forwarded {
				// Placement already chose this node.
				local.ServeHTTP(w, r)
				return
			}
			var m Member
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
			if cfg.AffinityKey != nil {
				key = cfg.AffinityKey(r, body)
			}
			if key != "" {
				// Every retry of a keyed create goes to the same owner,
				// whichever node it reaches, so that the owner's claim
				// decides them all; while that owner is down they wait.
				m, err = c.OwnerForKey(key)
			} else {
				m, err = c.PickOwner()
			}
			if err != nil {
				// No node may take it: answer so here, rather than make it
				// on a node that is full or drained.
				refuse(w, r, err)
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
			c.inflight(m.Name, 1)
			defer c.inflight(m.Name, -1)
			if m.Name == c.cfg.NodeName {
				local.ServeHTTP(w, r)
				return
			}
			target = m.Name
		default:
			p, found := c.rep.fsm.Placement(rt.sandbox)
			if !found && rt.byNameToo {
				p, found = c.rep.fsm.PlacementByName(rt.sandbox)
			}
			if found && p.State != PlacementPlaced && p.State != PlacementReserved {
				c.serveFailedOver(w, r, local, rt, p, cfg)
				return
			}
			if !found || p.Node == "" || p.Node == c.cfg.NodeName || rt.anonymous && p.State != PlacementPlaced {
				local.ServeHTTP(w, r)
				return
			}
			target = p.Node
		}
		if forwarded {
			// One hop only: the forwarding node thought this node owns the
			// sandbox and this node thinks otherwise; the index is moving.
			writeJSON(w, http.StatusMisdirectedRequest, map[string]any{"error": map[string]string{
				"code": apitypes.CodeMisdirected, "message": "sandbox is owned by " + target + ", not by this node"}})
			return
		}
		pj := []byte(anonymousPrincipal)
		if !rt.anonymous {
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
		r.Header.Del(HeaderPreview)
		r.Header.Del(HeaderSignedProbe)
		r.Header.Set(HeaderForwardedBy, c.cfg.NodeName)
		r.Header.Set(HeaderPrincipal, string(pj))
		r.Header.Set(HeaderClientAddr, r.RemoteAddr)
		r.Header.Set(HeaderForwardedBy+"-To", target)
		ctx, done := c.untilDown(r.Context(), target)
		defer done()
		proxy.ServeHTTP(w, r.WithContext(ctx))
	})
}

// transport dials other nodes' forwarded-API servers over the cluster port;
// the URL host is the node's name.
func (c *Cluster) transport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			raftAddr := c.addressOf(host)
			if raftAddr == "" {
				return nil, fmt.Errorf("%w: no address for node %s", errDial, host)
			}
			// A frozen or partitioned node accepts TCP and then never
			// answers the handshake; do not wait on it for long.
			dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			conn, err := c.mux.DialHTTP(dctx, raftAddr)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", errDial, host, err)
			}
			return conn, nil
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
}

// addressOf is the cluster port of a node, from gossip or else the index.
func (c *Cluster) addressOf(node string) string {
	for _, m := range c.gossip.Members() {
		if m.Name == node && m.Meta.Raft != "" {
			return m.Meta.Raft
		}
	}
	for _, n := range c.rep.fsm.Nodes() {
		if n.ID == node {
			return n.RaftAddr
		}
	}
	return ""
}

// ServeForwarded serves the API requests other nodes forward here, on the
// cluster port, until ctx ends. Each carries the principal its sending node
// authenticated, which the handler's authentication then accepts.
func (c *Cluster) ServeForwarded(ctx context.Context, h http.Handler) {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var p sandpit.Principal
			if err := json.Unmarshal([]byte(r.Header.Get(HeaderPrincipal)), &p); err != nil || r.Header.Get(HeaderForwardedBy) == "" {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"code": "bad_request", "message": "forwarded request without its principal"}})
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), forwardedKey{}, p))
			// The request is served as the client made it: the TLS of the
			// cluster port is this hop's, not the client's (the public
			// listeners speak plain HTTP; a TLS-terminating proxy in front
			// says so in X-Forwarded-Proto, which passes through), and the
			// client's address is the one the forwarding node saw.
			r.TLS = nil
			if a := r.Header.Get(HeaderClientAddr); a != "" {
				if _, _, err := net.SplitHostPort(a); err == nil {
					r.RemoteAddr = a
				}
				r.Header.Del(HeaderClientAddr)
			}
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(c.mux.HTTPListener()); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		c.log.Warn("cluster: forwarded API server", "err", err)
	}
}
