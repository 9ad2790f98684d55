package api

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// AgentProxy forwards requests to sandbox agents. FlushInterval -1 flushes
// every write at once, so Connect server streams (command output) pass
// through unbuffered.
type AgentProxy struct {
	transport http.RoundTripper
}

// NewAgentProxy builds a proxy with its own connection pool to the agents.
func NewAgentProxy() *AgentProxy {
	return &AgentProxy{transport: &http.Transport{
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // streams may take as long as the command
	}}
}

// Forward sends r to http://addr<path> (query kept). When token is non-empty
// it is set as the agent's X-Access-Token, replacing whatever the client sent.
func (p *AgentProxy) Forward(w http.ResponseWriter, r *http.Request, addr, path, token string) {
	EnableFullDuplex(w)
	// Agent calls stream their bodies (uploads, process input) for as long
	// as they last; the body-size bound still applies.
	httpguard.LiftReadDeadline(w)
	rp := &httputil.ReverseProxy{
		Transport:     p.transport,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: addr, Path: path, RawQuery: r.URL.RawQuery}
			pr.Out.Host = addr
			if token != "" {
				pr.Out.Header.Set("X-Access-Token", token)
			}
			pr.Out.Header.Del("Authorization")
			if u := r.Header.Get("Authorization"); u != "" && len(u) > 6 && u[:6] == "Basic " {
				// The E2B SDK names the process user with Basic auth.
				pr.Out.Header.Set("Authorization", u)
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if httpguard.IsTooLarge(err) {
				WriteJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": map[string]string{"code": CodeBodyTooLarge, "message": err.Error()}})
				return
			}
			WriteJSON(w, http.StatusBadGateway, map[string]any{"error": map[string]string{"code": CodeUpstream, "message": "sandbox agent unreachable: " + err.Error()}})
		},
	}
	rp.ServeHTTP(w, r)
}

// EnableFullDuplex lets a proxied request body keep flowing after the
// response has started. By default an HTTP/1 handler that starts its response
// has the server drain and close the rest of the request body; a proxy
// streams the body upstream while the agent may already be answering (a
// command's stream starts at once), so without this the upload is cut, and
// the stream with it, now and then mid-command. Writers that cannot do it
// (HTTP/2 always can) are left as they are.
func EnableFullDuplex(w http.ResponseWriter) {
	_ = http.NewResponseController(w).EnableFullDuplex()
}
