package agentrelay_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/api/agentrelay"
)

// TestRelayFromAHostileAgent: whatever a hijacked agent answers, the daemon
// relays it on the API origin as something no browser runs as a page of
// that origin, and the agent never sees the caller's credentials or the
// daemon's internal headers.
func TestRelayFromAHostileAgent(t *testing.T) {
	var got http.Header
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Disposition", "inline")
		w.Header().Set("Content-Security-Policy", "script-src *")
		w.Header().Set("Set-Cookie", "session=stolen; Path=/")
		_, _ = w.Write([]byte("<script>alert(sessionStorage.token)</script>"))
	}))
	defer agent.Close()
	addr := strings.TrimPrefix(agent.URL, "http://")
	rl := agentrelay.New(nil)

	for _, tc := range []struct{ name, method, path string }{
		{"file download", http.MethodGet, "/files"},
		{"connect call", http.MethodPost, "/process.Process/List"},
		{"other port", http.MethodGet, "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			req := httptest.NewRequest(tc.method, "http://api.test/e2b/envd"+tc.path, nil)
			req.Header.Set("Authorization", "Bearer spt_0123456789ab_secret")
			req.Header.Set("X-Api-Key", "admin-token")
			req.Header.Set("Cookie", "sandpit_session=x; other=y")
			req.Header.Set("Sandpit-Principal", `{"owner":"alice"}`)
			req.Header.Set("Sandpit-Forwarded-By", "node-1")
			req.Header.Set("X-Daytona-Preview-Token", "preview")
			req.Header.Set("X-Access-Token", "client's")
			rec := httptest.NewRecorder()
			rl.ToAgent(rec, req, addr, tc.path, "agent-token", func(w http.ResponseWriter, err error) {
				t.Errorf("agent unreachable: %v", err)
			})
			for _, h := range []string{"Authorization", "X-Api-Key", "Cookie", "Sandpit-Principal", "Sandpit-Forwarded-By", "X-Daytona-Preview-Token"} {
				if v := got.Get(h); v != "" {
					t.Errorf("the agent received %s: %q", h, v)
				}
			}
			if v := got.Get("X-Access-Token"); v != "agent-token" {
				t.Errorf("the agent received X-Access-Token %q, want the daemon's", v)
			}
			h := rec.Result().Header
			if h.Get("Set-Cookie") != "" {
				t.Errorf("Set-Cookie relayed: %q", h.Get("Set-Cookie"))
			}
			if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Content-Security-Policy") != "sandbox" {
				t.Errorf("nosniff %q, CSP %q; want nosniff and sandbox", h.Get("X-Content-Type-Options"), h.Values("Content-Security-Policy"))
			}
			if ct := h.Get("Content-Type"); ct != "application/octet-stream" {
				t.Errorf("Content-Type %q, want application/octet-stream", ct)
			}
			// A download always, anything else because it claimed inline.
			if cd := h.Get("Content-Disposition"); cd != "attachment" {
				t.Errorf("Content-Disposition %q, want attachment", cd)
			}
		})
	}

	// Basic auth names the process user for the E2B SDK and passes.
	req := httptest.NewRequest(http.MethodPost, "http://api.test/e2b/envd/process.Process/List", nil)
	req.SetBasicAuth("user", "")
	rl.ToAgent(httptest.NewRecorder(), req, addr, "/process.Process/List", "", func(http.ResponseWriter, error) {})
	if u, _, ok := (&http.Request{Header: got}).BasicAuth(); !ok || u != "user" {
		t.Errorf("Basic auth of the process user did not pass: %q", got.Get("Authorization"))
	}
}

// TestAgentInitIsDaemonOnly: no surface forwards the agent's init call,
// which replaces its token, however the path is spelled.
func TestAgentInitIsDaemonOnly(t *testing.T) {
	called := false
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		called = true
		w.WriteHeader(http.StatusNoContent)
	}))
	defer agent.Close()
	addr := strings.TrimPrefix(agent.URL, "http://")
	_, port, _ := strings.Cut(addr, ":")
	rl := agentrelay.New(nil)
	for _, p := range []string{"/init", "init", "//init", "/./init", "/x/../init"} {
		rec := httptest.NewRecorder()
		// The test agent is not on the agent's port: name that port.
		rl.ToAgent(rec, httptest.NewRequest(http.MethodPost, "http://api.test/x", strings.NewReader(`{"accessToken":"mine"}`)), "127.0.0.1:49983", p, "t", func(http.ResponseWriter, error) {})
		if rec.Code != http.StatusNotFound {
			t.Errorf("init as %q: %d, want 404", p, rec.Code)
		}
	}
	// The same path on another port is the sandbox's own server's.
	rec := httptest.NewRecorder()
	rl.ToAgent(rec, httptest.NewRequest(http.MethodPost, "http://api.test/x", nil), "127.0.0.1:"+port, "/init", "t", func(http.ResponseWriter, error) {})
	if !called || rec.Code != http.StatusNoContent {
		t.Errorf("/init on port %s: %d, called %v; want it passed", port, rec.Code, called)
	}
}
