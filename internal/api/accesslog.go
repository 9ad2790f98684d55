package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"

	"github.com/felixge/httpsnoop"
)

// RequestIDHeader carries a request's id. A client's own id is kept (within
// bounds) so one request can be followed across its logs and the daemon's.
const RequestIDHeader = "X-Request-Id"

// routeInfo is what the inner handlers learn about a request and the access
// log prints: the route pattern and the sandbox it concerns. Nested muxes
// set the pattern on their own copy of the request, so the outer log cannot
// read it from the request it holds.
type routeInfo struct {
	pattern string
	sandbox string
}

type routeInfoKey struct{}

// NoteRoute records the matched route pattern and sandbox id of the request
// in ctx for the access log; without an access log it does nothing.
func NoteRoute(ctx context.Context, pattern, sandboxID string) {
	if ri, ok := ctx.Value(routeInfoKey{}).(*routeInfo); ok {
		ri.pattern, ri.sandbox = pattern, sandboxID
	}
}

// RouteNoting wraps a route handler so it notes its pattern and the {id}
// path value for the access log. Its signature is the route wrapper the /v1
// handler takes.
func RouteNoting(pattern string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		NoteRoute(r.Context(), pattern, r.PathValue("id"))
		h.ServeHTTP(w, r)
	})
}

// validRequestID accepts a client's id of 1-128 visible ASCII characters;
// anything else (which could forge log lines) is replaced.
func validRequestID(id string) bool {
	if len(id) < 1 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AccessLog logs one structured line per request (method, route pattern,
// sandbox id, status, bytes, latency, request id) and gives every request an
// X-Request-Id, generated when the client sent none, echoed in the response.
// Health checks log at debug level, since probes call them constantly.
func AccessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			id = newRequestID()
			r.Header.Set(RequestIDHeader, id)
		}
		w.Header().Set(RequestIDHeader, id)
		ri := &routeInfo{}
		r = r.WithContext(context.WithValue(r.Context(), routeInfoKey{}, ri))
		start := time.Now()
		m := httpsnoop.CaptureMetrics(next, w, r)
		route := ri.pattern
		if route == "" {
			// The outer mux wrote the pattern it matched on this request.
			route = r.Pattern
		}
		level := slog.LevelInfo
		if r.URL.Path == "/health" {
			level = slog.LevelDebug
		}
		log.LogAttrs(r.Context(), level, "http request",
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.String("path", r.URL.Path),
			slog.String("sandbox", ri.sandbox),
			slog.Int("status", m.Code),
			slog.Int64("bytes", m.Written),
			slog.Duration("latency", time.Since(start)),
			slog.String("request_id", id),
		)
	})
}
