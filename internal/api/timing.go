package api

import (
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/timing"
)

// timedWriter adds the Server-Timing header of a create just before its
// response header is written, whichever path writes it.
type timedWriter struct {
	http.ResponseWriter
	timing *timing.Collector
	start  time.Time
	done   bool
}

func (w *timedWriter) WriteHeader(status int) {
	if !w.done {
		w.done = true
		w.timing.Total(w.start)
		w.Header().Set("Server-Timing", w.timing.Header())
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *timedWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *timedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServerTiming makes a create's response carry a Server-Timing header: the
// service phases (store, engine, agent) the request's context collects, and
// the handler's total.
func ServerTiming(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	ctx, t := timing.With(r.Context())
	return &timedWriter{ResponseWriter: w, timing: t, start: time.Now()}, r.WithContext(ctx)
}
