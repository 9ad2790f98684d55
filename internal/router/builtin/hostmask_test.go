package builtin_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
)

// TestRouteHostMask: a route's Host (E2B's maskRequestHost) is the Host
// header the sandbox's server sees, with the port the request named put in
// on an any-port route; a route without one passes the client's host.
func TestRouteHostMask(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Host)
	}))
	defer up.Close()
	host, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	b := builtin.New(builtin.Options{Domain: "example.test"})
	defer b.Close()
	ctx := context.Background()
	for _, r := range []router.Route{
		{Kind: router.KindAnyPort, SandboxID: "sbmask", Upstream: net.JoinHostPort(host, "0"), Host: "app-" + router.PortPlaceholder + ".internal"},
		{Kind: router.KindHTTP, SandboxID: "sbmask", Port: 9999, Upstream: up.Listener.Addr().String(), Host: "fixed.internal"},
		{Kind: router.KindAnyPort, SandboxID: "sbplain", Upstream: net.JoinHostPort(host, "0")},
	} {
		if err := b.Install(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	proxy := httptest.NewServer(b.Handler())
	defer proxy.Close()
	for _, tc := range []struct{ host, want string }{
		{port + "-sbmask.example.test", "app-" + port + ".internal"},
		{"9999-sbmask.example.test", "fixed.internal"},
		{port + "-sbplain.example.test", port + "-sbplain.example.test"},
	} {
		req, _ := http.NewRequest(http.MethodGet, proxy.URL, nil)
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != tc.want {
			t.Errorf("%s: %d %q, want the server to see Host %q", tc.host, resp.StatusCode, body, tc.want)
		}
	}
}
