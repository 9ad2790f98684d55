// Package agentrelay is the HTTP relay from the API surfaces to the agents
// and servers inside sandboxes: one reverse proxy that streams both ways,
// strips what the daemon consumed from the request and makes the answer
// safe to serve on the API origin. The domain decides where a request goes
// (the sandbox's address and token, whether it runs); the relay only
// carries it, and every error it answers itself goes through the API's one
// error mapping.
package agentrelay

import (
	"context"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// Relay is the one reverse proxy through which every surface reaches the
// agents.
type Relay struct {
	proxy *httputil.ReverseProxy
}

// New returns a relay over transport, which it shares with the daemon's
// own calls to the agents (nil: http.DefaultTransport).
func New(transport http.RoundTripper) *Relay {
	return &Relay{proxy: &httputil.ReverseProxy{
		Transport: transport,
		// -1 flushes every write at once, so Connect server streams (command
		// output) pass through unbuffered.
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			f := pr.In.Context().Value(forwardKey{}).(*forward)
			pr.Out.URL = &url.URL{Scheme: "http", Host: f.addr, Path: f.path, RawQuery: pr.In.URL.RawQuery}
			pr.Out.Host = f.addr
			if f.host != "" {
				pr.Out.Host = f.host
			}
			// The agent is untrusted: it never sees the daemon's
			// credentials, cookies or internal headers. Basic auth passes:
			// the E2B SDK names the process user with it.
			stripForAgent(pr.Out.Header)
			if f.token != "" {
				pr.Out.Header.Set(agentapi.AccessTokenHeader, f.token)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			f := resp.Request.Context().Value(forwardKey{}).(*forward)
			guardRelayed(resp.Header, f.path, resp.Request.Method)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if httpguard.IsTooLarge(err) {
				api.WriteError(w, r, api.ErrBodyTooLarge)
				return
			}
			r.Context().Value(forwardKey{}).(*forward).onError(w, err)
		},
	}}
}

type forwardKey struct{}

// forward is one proxied request's target, carried in its context to the
// shared proxy.
type forward struct {
	addr, path, token string
	host              string // the Host header sent ("" for addr)
	onError           func(http.ResponseWriter, error)
}

// ToAgent proxies r to path on the agent at addr, streaming both ways. A
// non-empty token replaces whatever access token the client sent; onError
// answers when the agent cannot be reached, in the caller's error shape.
func (rl *Relay) ToAgent(w http.ResponseWriter, r *http.Request, addr, path, token string, onError func(http.ResponseWriter, error)) {
	rl.relay(w, r, &forward{addr: addr, path: path, token: token}, onError)
}

// ToServer proxies r to path on a server in a sandbox at addr, as ToAgent
// does, with host as the Host header the server sees (the sandbox's
// maskRequestHost; "" sends addr).
func (rl *Relay) ToServer(w http.ResponseWriter, r *http.Request, addr, path, host string, onError func(http.ResponseWriter, error)) {
	rl.relay(w, r, &forward{addr: addr, path: path, host: host}, onError)
}

// relay proxies r as f says.
func (rl *Relay) relay(w http.ResponseWriter, r *http.Request, f *forward, onError func(http.ResponseWriter, error)) {
	if _, port, _ := net.SplitHostPort(f.addr); agentapi.DaemonOnlyPath(atoiOr0(port), f.path) {
		// Only the daemon rotates an agent's token (pool adoption); no
		// surface passes the call on, whatever token it carries.
		api.WriteError(w, r, sandpit.ErrNotFound)
		return
	}
	// A proxied request body must keep flowing after the response starts:
	// the agent may answer a streamed RPC before the upload ends, and by
	// default the server would then drain and close the rest of the body.
	_ = http.NewResponseController(w).EnableFullDuplex()
	// Agent calls stream their bodies (uploads, process input) for as long
	// as they last; the body-size bound still applies.
	httpguard.LiftReadDeadline(w)
	f.onError = func(w http.ResponseWriter, err error) {
		finishUnsentBody(w, r)
		onError(w, err)
	}
	rl.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, f)))
}

// stripForAgent removes from h, a request on its way from the API listener
// to a sandbox (the E2B envd gateway, the native agent routes, a forwarded
// cluster call), every credential and internal header the daemon consumed:
// Authorization unless it is the Basic pair the E2B SDK names the process
// user with, every cookie (the API origin sets none a sandbox may read),
// the API key, preview and traffic token headers and every Sandpit-* header.
func stripForAgent(h http.Header) {
	if !strings.HasPrefix(h.Get("Authorization"), "Basic ") {
		h.Del("Authorization")
	}
	for _, name := range []string{"Cookie", sandpit.APIKeyHeader, sandpit.PreviewTokenHeader, sandpit.TrafficTokenHeader} {
		h.Del(name)
	}
	for k := range h {
		if sandpit.IsInternalHeader(k) {
			delete(h, k)
		}
	}
}

func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// finishUnsentBody reads what is left of a request body the agent never
// got (it could not be reached), before the error answer is written. With
// full duplex on, net/http leaves the body to the server's own close after
// the handler, and that close, reaching the end of a short body, starts
// the connection's background read after it was stopped: two readers of
// one connection, which net/http answers with a panic ("invalid concurrent
// Body.Read call"). Read here, the end comes while the handler runs, as it
// does for a body the agent read. A body too long to read is not read: the
// connection is closed after the answer instead.
func finishUnsentBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	const most = 1 << 20
	n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, most+1))
	if n > most {
		w.Header().Set("Connection", "close")
	}
}

// relayedTypes are the content types the agent protocol answers with and
// that no browser renders as a document; any other type a sandbox sends
// is replaced by application/octet-stream.
var relayedTypes = map[string]bool{
	"application/json":          true,
	"application/connect+json":  true,
	"application/connect+proto": true,
	"application/proto":         true,
	"application/grpc":          true,
	"application/grpc+proto":    true,
	"application/grpc+json":     true,
	"application/octet-stream":  true,
	"text/plain":                true,
	"text/event-stream":         true,
}

// guardRelayed makes a response relayed from a sandbox safe to serve on
// the API listener, the dashboard's origin. The sandbox is untrusted (root
// in it can replace its agent), so whatever it sends must never run as a
// page of this origin: the response is sandboxed by CSP (an opaque origin,
// no scripts), never sniffed, cannot set cookies here, and a file download
// is an attachment of type application/octet-stream whatever type the
// sandbox claimed. Content types the protocol's clients read (JSON, Connect,
// plain text) pass; the SDKs read bodies, they do not render them.
func guardRelayed(h http.Header, agentPath, method string) {
	h.Del("Set-Cookie")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	if path.Clean("/"+agentPath) == agentapi.FilesPath && (method == http.MethodGet || method == http.MethodHead) {
		if mt, _, _ := mime.ParseMediaType(h.Get("Content-Type")); mt != "application/json" {
			// A download (the agent's JSON error bodies keep their type:
			// the SDKs parse them).
			h.Set("Content-Type", "application/octet-stream")
			h.Set("Content-Disposition", "attachment")
			return
		}
	}
	if mt, _, _ := mime.ParseMediaType(h.Get("Content-Type")); h.Get("Content-Type") != "" && !relayedTypes[mt] {
		h.Set("Content-Type", "application/octet-stream")
	}
	if cd := h.Get("Content-Disposition"); cd != "" && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(cd)), "attachment") {
		h.Set("Content-Disposition", "attachment")
	}
}
