package service

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
	"time"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/internal/router"
)

// agentLink is the one HTTP client and the one reverse proxy through which
// every surface reaches the agents.
type agentLink struct {
	http  *http.Client
	proxy *httputil.ReverseProxy
}

func newAgentLink() *agentLink {
	// No overall timeout: a command's stream lasts as long as the command,
	// a file transfer as long as the file.
	transport := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
	l := &agentLink{http: &http.Client{Transport: transport}}
	l.proxy = &httputil.ReverseProxy{
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
			router.StripForAgent(pr.Out.Header)
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
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				_, _ = w.Write([]byte(`{"error":{"code":"body_too_large","message":"request body too large"}}`))
				return
			}
			r.Context().Value(forwardKey{}).(*forward).onError(w, err)
		},
	}
	return l
}

type forwardKey struct{}

// forward is one proxied request's target, carried in its context to the
// shared proxy.
type forward struct {
	addr, path, token string
	host              string // the Host header sent ("" for addr)
	onError           func(http.ResponseWriter, error)
}

// Agent returns the connection to a running sandbox's agent.
func (s *Service) Agent(ctx context.Context, id string) (agentapi.Agent, error) {
	addr, token, err := s.AgentTarget(ctx, id)
	if err != nil {
		return agentapi.Agent{}, err
	}
	s.mu.Lock()
	c, ok := s.agentClients[addr]
	if !ok {
		c = agentapi.NewClients(s.agents.http, addr)
		s.agentClients[addr] = c
	}
	s.mu.Unlock()
	return agentapi.Agent{Addr: addr, Token: token, Process: c.Process, Filesystem: c.Filesystem}, nil
}

// AgentHTTP is the client for the agent's plain HTTP endpoints (/files),
// sharing the Connect clients' connections.
func (s *Service) AgentHTTP() *http.Client { return s.agents.http }

// ForwardToAgent proxies r to path on the agent at addr, streaming both ways.
// A non-empty token replaces whatever access token the client sent; onError
// answers when the agent cannot be reached, in the caller's error shape.
func (s *Service) ForwardToAgent(w http.ResponseWriter, r *http.Request, addr, path, token string, onError func(http.ResponseWriter, error)) {
	if _, port, _ := net.SplitHostPort(addr); DaemonOnlyAgentPath(atoiOr0(port), path) {
		// Only the daemon rotates an agent's token (pool adoption); no
		// surface passes the call on, whatever token it carries.
		api404(w)
		return
	}
	s.forwardTo(w, r, &forward{addr: addr, path: path, token: token}, onError)
}

// forwardTo proxies r as f says.
func (s *Service) forwardTo(w http.ResponseWriter, r *http.Request, f *forward, onError func(http.ResponseWriter, error)) {
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
	s.agents.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, f)))
}

// ForwardToServer proxies r to path on a server in a sandbox at addr, as
// ForwardToAgent does, with host as the Host header the server sees (the
// sandbox's maskRequestHost; "" sends addr).
func (s *Service) ForwardToServer(w http.ResponseWriter, r *http.Request, addr, path, host string, onError func(http.ResponseWriter, error)) {
	if _, port, _ := net.SplitHostPort(addr); DaemonOnlyAgentPath(atoiOr0(port), path) {
		api404(w)
		return
	}
	s.forwardTo(w, r, &forward{addr: addr, path: path, host: host}, onError)
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

// DaemonOnlyAgentPath reports whether a request for p on a sandbox's port
// is one only the daemon makes: the agent's init call, which replaces its
// access token and environment. Surfaces and the preview proxy refuse it.
func DaemonOnlyAgentPath(port int, p string) bool {
	return port == agentapi.Port && path.Clean("/"+p) == agentapi.InitPath
}

func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func api404(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"not found"}}`))
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
