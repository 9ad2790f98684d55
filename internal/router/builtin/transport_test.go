package builtin_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
)

// proxyTo serves the builtin proxy with one route, sbone-8080.example.test,
// to upstream.
func proxyTo(t *testing.T, upstream *httptest.Server) *httptest.Server {
	t.Helper()
	rt := builtin.New(builtin.Options{Domain: "example.test"})
	t.Cleanup(func() { rt.Close() })
	if err := rt.Install(context.Background(), router.Route{Kind: router.KindHTTP, SandboxID: "sbone", Port: 8080, Upstream: upstream.Listener.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(rt.Handler())
	t.Cleanup(proxy.Close)
	return proxy
}

func previewRequest(t *testing.T, ctx context.Context, proxy *httptest.Server, method, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, proxy.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "sbone-8080.example.test"
	return req
}

// TestProxyToClosingUpstream: an upstream that closes every connection (as
// busybox httpd does) is answered the same on the first request, which
// learns that, and on the ones after it; the proxy hands the upstream the
// client's Accept-Encoding (none) rather than asking for gzip itself.
func TestProxyToClosingUpstream(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Seen-Accept-Encoding", r.Header.Get("Accept-Encoding"))
		switch r.URL.Path {
		case "/small":
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
		case "/chunked":
			_, _ = io.WriteString(w, "part one, ")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "part two")
		case "/big":
			_, _ = io.WriteString(w, big)
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer up.Close()
	proxy := proxyTo(t, up)
	hc := proxy.Client()
	hc.Transport.(*http.Transport).DisableCompression = true
	cases := []struct {
		method, path string
		status       int
		body         string
	}{
		{http.MethodGet, "/small", 200, "hello"},
		{http.MethodHead, "/small", 200, ""},
		{http.MethodGet, "/chunked", 200, "part one, part two"},
		{http.MethodGet, "/big", 200, big},
		{http.MethodGet, "/empty", 204, ""},
	}
	for round := range 3 {
		for _, tc := range cases {
			resp, err := hc.Do(previewRequest(t, context.Background(), proxy, tc.method, tc.path))
			if err != nil {
				t.Fatalf("round %d %s %s: %v", round, tc.method, tc.path, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.status || string(body) != tc.body {
				t.Fatalf("round %d %s %s: %d, %d bytes, %v; want %d, %d bytes", round, tc.method, tc.path, resp.StatusCode, len(body), err, tc.status, len(tc.body))
			}
			if got := resp.Header.Get("Seen-Accept-Encoding"); got != "" {
				t.Fatalf("round %d %s %s: upstream saw Accept-Encoding %q; the client sent none", round, tc.method, tc.path, got)
			}
		}
	}
}

// TestProxyEarlyHintsFromClosingUpstream: informational answers (103) of
// an upstream that closes its connections reach the client before the
// final answer, on every request.
func TestProxyEarlyHintsFromClosingUpstream(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "done")
	}))
	defer up.Close()
	proxy := proxyTo(t, up)
	for round := range 3 {
		var hints []string
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				hints = append(hints, h.Get("Link"))
				return nil
			},
		})
		resp, err := proxy.Client().Do(previewRequest(t, ctx, proxy, http.MethodGet, "/"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "done" || len(hints) != 1 || hints[0] != "</style.css>; rel=preload" {
			t.Fatalf("round %d: body %q, early hints %q", round, body, hints)
		}
	}
}

// TestProxyClientGoneEndsUpstream: a client that gives up on a response
// from an upstream that closes its connections ends the upstream's
// request too, on the requests after the first as well.
func TestProxyClientGoneEndsUpstream(t *testing.T) {
	ended := make(chan struct{}, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		if r.URL.Path == "/quick" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		_, _ = io.WriteString(w, "first part")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			ended <- struct{}{}
		case <-time.After(20 * time.Second):
		}
	}))
	defer up.Close()
	proxy := proxyTo(t, up)
	// The upstream is known to close its connections from here on.
	resp, err := proxy.Client().Do(previewRequest(t, context.Background(), proxy, http.MethodGet, "/quick"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := proxy.Client().Do(previewRequest(t, ctx, proxy, http.MethodGet, "/slow"))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len("first part"))
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first part" {
			t.Fatalf("round %d: %q %v", round, buf, err)
		}
		cancel()
		resp.Body.Close()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the upstream's request went on after the client left", round)
		}
	}
}
