package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit"
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

// ErrDial marks a forward that never reached the target node.
var ErrDial = errors.New("cannot reach node")

// Forwarded returns the principal a forwarded request carries, when ctx is
// a request's that arrived on the cluster port.
func Forwarded(ctx context.Context) (sandpit.Principal, bool) {
	p, ok := ctx.Value(forwardedKey{}).(sandpit.Principal)
	return p, ok
}

// Transport dials other nodes' forwarded-API servers over the cluster port;
// the URL host is the node's name.
func (c *Cluster) Transport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			raftAddr := c.addressOf(host)
			if raftAddr == "" {
				return nil, fmt.Errorf("%w: no address for node %s", ErrDial, host)
			}
			// A frozen or partitioned node accepts TCP and then never
			// answers the handshake; do not wait on it for long.
			dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			conn, err := c.mux.DialHTTP(dctx, raftAddr)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrDial, host, err)
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
				// Only a node of this cluster reaches this port, and every
				// node sends both headers: this is a bug, not a client's
				// error, so it is answered in the native shape alone,
				// written out here because the cluster knows no wire type.
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `{"error":{"code":"bad_request","message":"forwarded request without its principal"}}`+"\n")
				return
			}
			r = r.WithContext(WithForwarded(r.Context(), p))
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

// WithForwarded marks ctx as a forwarded request's, acting as p: what
// ServeForwarded does for a request that arrived on the cluster port, for
// the gateway to do when it serves one of its own fan-outs in process.
func WithForwarded(ctx context.Context, p sandpit.Principal) context.Context {
	return context.WithValue(ctx, forwardedKey{}, p)
}

// Peers lists the members gossip knows, in any state, with their metadata:
// the nodes the gateway fans listings and event streams out to.
func (c *Cluster) Peers() []Member { return c.gossip.Members() }

// Logger is the cluster's logger, for the parts of a node that act for it.
func (c *Cluster) Logger() *slog.Logger { return c.log }
