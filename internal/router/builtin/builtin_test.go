package builtin_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
)

// TestRoutesByHost installs routes towards a real upstream and sends real
// requests through the proxy handler.
func TestRoutesByHost(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream saw "+r.Host)
	}))
	defer up.Close()
	upAddr := up.Listener.Addr().String()
	b := builtin.New(builtin.Options{Domain: "example.test"})
	defer b.Close()
	ctx := context.Background()
	for _, r := range []router.Route{
		{Kind: router.KindHTTP, SandboxID: "sbone", Port: 8080, Upstream: upAddr},
		{Kind: router.KindDomain, SandboxID: "sbone", Port: 8080, Hostname: "app.custom.test", Upstream: upAddr},
	} {
		if err := b.Install(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := b.Install(ctx, r); err != nil { // idempotent
			t.Fatal(err)
		}
	}
	proxy := httptest.NewServer(b.Handler())
	defer proxy.Close()
	cases := []struct {
		host   string
		status int
	}{
		{"sbone-8080.example.test", 200},
		{"8080-sbone.example.test:7480", 200},
		{"SBONE-8080.Example.Test", 200},
		{"app.custom.test", 200},
		{"sbone-9090.example.test", 404},
		{"sbtwo-8080.example.test", 404},
		{"a.sbone-8080.example.test", 404},
		{"unrelated.test", 404},
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, proxy.URL, nil)
			req.Host = tc.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
	routes, _ := b.Routes(ctx)
	if len(routes) != 2 {
		t.Fatalf("%d routes installed, want 2", len(routes))
	}
	if err := b.Remove(ctx, routes[0]); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, routes[0]); err != nil { // removing twice is fine
		t.Fatal(err)
	}
}

// TestTCPForward splices a host port to an upstream echo server.
func TestTCPForward(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	hostPort := testkit.FreePort(t)
	b := builtin.New(builtin.Options{})
	defer b.Close()
	r := router.Route{Kind: router.KindTCP, SandboxID: "sbone", Port: 9000, HostPort: hostPort, Upstream: echo.Addr().String()}
	if err := b.Install(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(hostPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo = %q %v", buf, err)
	}
	if err := b.Remove(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if c2, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(hostPort)); err == nil {
		c2.Close()
		t.Fatal("host port still accepts after the route was removed")
	}
}

// TestAnyPortRoutes: an any-port route serves <port>-<id>.<domain> for every
// port of its sandbox, publicly or only with the traffic token, while a
// port's own route keeps precedence and needs no token.
func TestAnyPortRoutes(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(router.TrafficTokenHeader) != "" {
			t.Error("the traffic token reached the sandbox")
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	host, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	b := builtin.New(builtin.Options{Domain: "example.test"})
	defer b.Close()
	ctx := context.Background()
	for _, r := range []router.Route{
		{Kind: router.KindAnyPort, SandboxID: "sbpub", Upstream: net.JoinHostPort(host, "0")},
		{Kind: router.KindAnyPort, SandboxID: "sbpriv", Upstream: net.JoinHostPort(host, "0"), TrafficToken: "secret"},
		{Kind: router.KindHTTP, SandboxID: "sbpriv", Port: 9999, Upstream: up.Listener.Addr().String()},
	} {
		if err := b.Install(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	proxy := httptest.NewServer(b.Handler())
	defer proxy.Close()
	for _, tc := range []struct {
		host, token string
		status      int
	}{
		{port + "-sbpub.example.test", "", 200},
		{port + "-sbpriv.example.test", "", 403},
		{port + "-sbpriv.example.test", "wrong", 403},
		{port + "-sbpriv.example.test", "secret", 200},
		{"9999-sbpriv.example.test", "", 200}, // its own (exposed) route: no token asked
		{port + "-sbother.example.test", "", 404},
	} {
		t.Run(tc.host+"/"+tc.token, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, proxy.URL, nil)
			req.Host = tc.host
			if tc.token != "" {
				req.Header.Set(router.TrafficTokenHeader, tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}

// TestUnreachableUpstreamAnswer: a preview whose upstream fails is a 502
// that says what went wrong in words and does not quote the upstream's
// address (the dial error named the container's address on the engine's
// network to whoever held the preview URL).
func TestUnreachableUpstreamAnswer(t *testing.T) {
	// A port with nothing listening: bind one, then close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()
	// A server that closes each connection without answering.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1024)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	b := builtin.New(builtin.Options{Domain: "example.test"})
	defer b.Close()
	ctx := context.Background()
	for port, upstream := range map[int]string{8080: closedAddr, 8081: mute.Addr().String()} {
		if err := b.Install(ctx, router.Route{Kind: router.KindHTTP, SandboxID: "sbone", Port: port, Upstream: upstream}); err != nil {
			t.Fatal(err)
		}
	}
	proxy := httptest.NewServer(b.Handler())
	defer proxy.Close()
	cases := []struct {
		host, upstream, want string
	}{
		{"sbone-8080.example.test", closedAddr, "sandpit: nothing listens on port 8080 of sandbox sbone\n"},
		{"sbone-8081.example.test", mute.Addr().String(), "sandpit: the server on port 8081 of sandbox sbone closed the connection without an answer\n"},
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, proxy.URL+"/", nil)
			req.Host = tc.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || string(body) != tc.want {
				t.Fatalf("got %d %q, want 502 %q", resp.StatusCode, body, tc.want)
			}
			if host, _, _ := net.SplitHostPort(tc.upstream); strings.Contains(string(body), host) {
				t.Fatalf("the answer quotes the upstream's address: %q", body)
			}
		})
	}
}
