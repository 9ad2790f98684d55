// Package builtin is Sandpit's default router: an in-process HTTP reverse
// proxy that routes by Host, and one TCP listener per exposed host port.
package builtin

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/internal/router"
)

var _ router.Router = (*Builtin)(nil)

// Options configure the builtin router.
type Options struct {
	// Domain is the suffix of preview hosts: <id>-<port>.<Domain> and
	// <port>-<id>.<Domain> both route to a sandbox port.
	Domain string
	// TCPBindHost is the address TCP exposures listen on.
	TCPBindHost string
	Logger      *slog.Logger
	// DaemonCredential reports whether a value presented in Authorization
	// or X-Api-Key is one of the daemon's own tokens; such headers are
	// removed before a request reaches a sandbox (see
	// router.StripForPreview). Nil removes none of them.
	DaemonCredential func(string) bool
	// DaemonOnly reports whether a request for path on a sandbox's port
	// is one only the daemon may make (the agent's init call, which
	// rotates its token); the proxy answers those 404. Nil refuses none.
	DaemonOnly func(port int, path string) bool
}

// Builtin routes HTTP by Host and forwards TCP host ports.
type Builtin struct {
	opts      Options
	log       *slog.Logger
	transport *upstreamTransport
	buffers   *bufferPool

	mu      sync.RWMutex
	http    map[string]router.Route // "<id>:<port>"
	any     map[string]router.Route // sandbox id
	domains map[string]router.Route // hostname
	tcp     map[int]*forwarder      // host port
	closed  bool
}

// New builds a Builtin router.
func New(opts Options) *Builtin {
	if opts.Domain == "" {
		opts.Domain = "localhost"
	}
	if opts.TCPBindHost == "" {
		opts.TCPBindHost = "127.0.0.1"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Builtin{
		opts:      opts,
		log:       opts.Logger,
		transport: newUpstreamTransport(),
		buffers:   &bufferPool{},
		http:      map[string]router.Route{},
		any:       map[string]router.Route{},
		domains:   map[string]router.Route{},
		tcp:       map[int]*forwarder{},
	}
}

func httpKey(id string, port int) string { return id + ":" + strconv.Itoa(port) }

// Install adds or replaces a route.
func (b *Builtin) Install(ctx context.Context, r router.Route) error {
	if _, _, err := net.SplitHostPort(r.Upstream); err != nil {
		return fmt.Errorf("route %s: bad upstream %q: %w", r.Key(), r.Upstream, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("router closed")
	}
	switch r.Kind {
	case router.KindHTTP:
		b.http[httpKey(r.SandboxID, r.Port)] = r
	case router.KindDomain:
		b.domains[r.Hostname] = r
	case router.KindAnyPort:
		b.any[r.SandboxID] = r
	case router.KindTCP:
		if f, ok := b.tcp[r.HostPort]; ok {
			// Keep the listener (clients may be connected); point it anew.
			f.setRoute(r)
			return nil
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(b.opts.TCPBindHost, strconv.Itoa(r.HostPort)))
		if err != nil {
			return fmt.Errorf("listen on host port %d: %w", r.HostPort, err)
		}
		f := &forwarder{ln: ln, log: b.log, conns: map[net.Conn]struct{}{}}
		f.setRoute(r)
		b.tcp[r.HostPort] = f
		go f.serve()
	default:
		return fmt.Errorf("unknown route kind %q", r.Kind)
	}
	return nil
}

// Remove deletes a route; a missing route is not an error.
func (b *Builtin) Remove(ctx context.Context, r router.Route) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch r.Kind {
	case router.KindHTTP:
		delete(b.http, httpKey(r.SandboxID, r.Port))
		// Idle connections to the old upstream would outlive the route and
		// could reach whatever container gets its address next.
		b.transport.CloseIdleConnections()
	case router.KindDomain:
		delete(b.domains, r.Hostname)
		b.transport.CloseIdleConnections()
	case router.KindAnyPort:
		delete(b.any, r.SandboxID)
		b.transport.CloseIdleConnections()
	case router.KindTCP:
		if f, ok := b.tcp[r.HostPort]; ok {
			f.close()
			delete(b.tcp, r.HostPort)
		}
	}
	return nil
}

// Routes lists the installed routes in a stable order.
func (b *Builtin) Routes(ctx context.Context) ([]router.Route, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]router.Route, 0, len(b.http)+len(b.any)+len(b.domains)+len(b.tcp))
	for _, r := range b.http {
		out = append(out, r)
	}
	for _, r := range b.any {
		out = append(out, r)
	}
	for _, r := range b.domains {
		out = append(out, r)
	}
	for _, f := range b.tcp {
		out = append(out, f.route())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out, nil
}

// Listeners returns the host ports with a bound TCP listener, in order.
func (b *Builtin) Listeners() []int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]int, 0, len(b.tcp))
	for p := range b.tcp {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// Close stops every TCP listener.
func (b *Builtin) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for p, f := range b.tcp {
		f.close()
		delete(b.tcp, p)
	}
	return nil
}

// Resolve finds the upstream for a Host header.
func (b *Builtin) Resolve(host string) (router.Route, bool) {
	return b.ResolvePreview(sandpit.ParsePreviewHost(host, b.opts.Domain))
}

// ResolvePreview finds the upstream for a Host already read against the
// preview domain (sandpit.ResolvePreviewHost), so a handler in front of the
// proxy that has the reading does not parse the host again.
func (b *Builtin) ResolvePreview(p sandpit.PreviewHost) (router.Route, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if r, ok := b.domains[p.Host]; ok {
		return r, true
	}
	if !p.OK {
		return router.Route{}, false
	}
	id, port := p.SandboxID, p.Port
	if r, ok := b.http[httpKey(id, port)]; ok {
		return r, true
	}
	// Every other port of a sandbox whose ports are all served (E2B's
	// model); the agent's port always has its own route above.
	r, ok := b.any[id]
	if !ok {
		return router.Route{}, false
	}
	host, _, err := net.SplitHostPort(r.Upstream)
	if err != nil {
		return router.Route{}, false
	}
	r.Port = port
	r.Upstream = net.JoinHostPort(host, strconv.Itoa(port))
	r.Host = strings.ReplaceAll(r.Host, router.PortPlaceholder, strconv.Itoa(port))
	return r, true
}

// Handler is the HTTP side of the proxy.
func (b *Builtin) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The host was read by the first handler in front of the proxy;
		// a request that reaches the proxy directly is read here.
		p, _, _ := sandpit.ResolvePreviewHost(r.Context(), r.Host, b.opts.Domain)
		rt, ok := b.ResolvePreview(p)
		if !ok {
			http.Error(w, "sandpit: no route for host "+r.Host, http.StatusNotFound)
			return
		}
		if rt.TrafficToken != "" {
			got := r.Header.Get(rt.Header())
			if subtle.ConstantTimeCompare([]byte(got), []byte(rt.TrafficToken)) != 1 {
				if rt.Header() == router.PreviewTokenHeader {
					http.Error(w, "sandpit: this port is private: it needs its preview token in the "+router.PreviewTokenHeader+" header, or a signed preview URL", http.StatusForbidden)
				} else {
					http.Error(w, "sandpit: this sandbox's ports need its traffic token in the "+router.TrafficTokenHeader+" header", http.StatusForbidden)
				}
				return
			}
		}
		if rt.AccessToken != "" && router.NeedsAccessToken(rt.Port, r.URL.Path) &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get(router.AccessTokenHeader)), []byte(rt.AccessToken)) != 1 {
			http.Error(w, "sandpit: running code needs the sandbox's access token in the "+router.AccessTokenHeader+" header", http.StatusUnauthorized)
			return
		}
		// Credentials meant for the proxy stay here.
		r.Header.Del(router.TrafficTokenHeader)
		r.Header.Del(router.PreviewTokenHeader)
		if b.opts.DaemonOnly != nil && b.opts.DaemonOnly(rt.Port, r.URL.Path) {
			http.Error(w, "sandpit: not found", http.StatusNotFound)
			return
		}
		// The exchange streams for as long as the sandbox's server wants;
		// the body-size bound still applies.
		httpguard.LiftReadDeadline(w)
		// Keep the request body flowing upstream after the response starts
		// (streaming RPCs through preview hosts); see agentrelay.Relay.
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp := &httputil.ReverseProxy{
			Transport:     b.transport,
			BufferPool:    b.buffers,
			FlushInterval: -1,
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(&url.URL{Scheme: "http", Host: rt.Upstream})
				pr.Out.Host = r.Host
				if rt.Host != "" {
					pr.Out.Host = rt.Host
				}
				pr.SetXForwarded()
				// The sandbox's server is untrusted: it never sees the
				// daemon's credentials or internal headers.
				router.StripForPreview(pr.Out.Header, b.opts.DaemonCredential)
			},
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				b.unreachable(w, r, rt, err)
			},
		}
		rp.ServeHTTP(w, r)
	})
}

// unreachable answers a request whose upstream failed. The answer names the
// sandbox and port and what went wrong in words, never the dial error
// itself, which quotes the container's address on the engine's network to
// whoever holds the preview URL.
func (b *Builtin) unreachable(w http.ResponseWriter, r *http.Request, rt router.Route, err error) {
	if r.Context().Err() != nil {
		// The client went away; nobody reads the answer.
		return
	}
	b.log.Debug("preview upstream failed", "sandbox", rt.SandboxID, "port", rt.Port, "err", err)
	port := "port " + strconv.Itoa(rt.Port) + " of sandbox " + rt.SandboxID
	var ne net.Error
	var what string
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		what = "nothing listens on " + port
	case errors.As(err, &ne) && ne.Timeout():
		what = port + " did not answer in time"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		what = "the server on " + port + " closed the connection without an answer"
	default:
		what = port + " is unreachable"
	}
	http.Error(w, "sandpit: "+what, http.StatusBadGateway)
}

// forwarder is one TCP exposure: a listener whose connections are spliced to
// the sandbox port.
type forwarder struct {
	ln  net.Listener
	log *slog.Logger

	mu    sync.Mutex
	r     router.Route
	conns map[net.Conn]struct{}
	done  bool
}

func (f *forwarder) setRoute(r router.Route) {
	f.mu.Lock()
	f.r = r
	f.mu.Unlock()
}

func (f *forwarder) route() router.Route {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.r
}

func (f *forwarder) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if add {
		if f.done {
			return false
		}
		f.conns[c] = struct{}{}
	} else {
		delete(f.conns, c)
	}
	return true
}

func (f *forwarder) close() {
	f.mu.Lock()
	f.done = true
	conns := f.conns
	f.conns = map[net.Conn]struct{}{}
	f.mu.Unlock()
	f.ln.Close()
	for c := range conns {
		c.Close()
	}
}

func (f *forwarder) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.splice(c)
	}
}

func (f *forwarder) splice(client net.Conn) {
	defer client.Close()
	up, err := net.DialTimeout("tcp", f.route().Upstream, 5*time.Second)
	if err != nil {
		f.log.Debug("tcp forward: dial upstream", "err", err)
		return
	}
	defer up.Close()
	if !f.track(client, true) || !f.track(up, true) {
		return
	}
	defer f.track(client, false)
	defer f.track(up, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close so the far side sees EOF but can still answer.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, client)
	go pipe(client, up)
	<-done
	<-done
}
