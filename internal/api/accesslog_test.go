package api_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// routed is a small mux like /v1's: the inner handler notes its route.
func routed() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/sandboxes/{id}", api.RouteNoting("GET /v1/sandboxes/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"id":"`+r.PathValue("id")+`"}`)
	})))
	outer := http.NewServeMux()
	outer.Handle("/v1/", mux)
	return outer
}

func TestAccessLogLine(t *testing.T) {
	var buf bytes.Buffer
	h := api.AccessLog(slog.New(slog.NewTextHandler(&buf, nil)), routed())
	for _, tc := range []struct {
		name, sent string
		keep       bool
	}{
		{"kept", "abc-123", true},
		{"generated", "", false},
		{"too long", strings.Repeat("x", 129), false},
		{"control characters", "a\tb", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf.Reset()
			req := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/sb1", nil)
			if tc.sent != "" {
				req.Header.Set("X-Request-Id", tc.sent)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			got := rec.Header().Get("X-Request-Id")
			if tc.keep && got != tc.sent || !tc.keep && (got == tc.sent || len(got) != 24) {
				t.Fatalf("X-Request-Id = %q (sent %q)", got, tc.sent)
			}
			line := buf.String()
			for _, want := range []string{`route="GET /v1/sandboxes/{id}"`, "sandbox=sb1", "status=200", "bytes=12", "request_id=" + got, "latency="} {
				if !strings.Contains(line, want) {
					t.Errorf("log line %q lacks %q", line, want)
				}
			}
		})
	}
}

// BenchmarkAccessLog measures what the access log adds to a request: run
// with -bench AccessLog and compare the two sub-benchmarks.
func BenchmarkAccessLog(b *testing.B) {
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", routed()},
		{"logged", api.AccessLog(slog.New(slog.NewTextHandler(io.Discard, nil)), routed())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/sb1", nil)
			b.ReportAllocs()
			for b.Loop() {
				bc.h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
