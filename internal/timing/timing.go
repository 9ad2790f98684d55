// Package timing collects the phases of one request (store, engine, agent) for
// its Server-Timing header. The domain records phases into the collector the
// request's context carries; the API renders it. It is a leaf, so any
// aggregate can record without knowing HTTP.
package timing

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Collector collects the phases of one request (store, engine, agent) for
// its Server-Timing header, so users and benchmarks see where a create's
// time goes.
type Collector struct {
	mu     sync.Mutex
	order  []string
	phases map[string]time.Duration
	desc   string
}

type key struct{}

// With returns a context whose service calls record their phases
// into the returned collector.
func With(ctx context.Context) (context.Context, *Collector) {
	t := &Collector{phases: map[string]time.Duration{}}
	return context.WithValue(ctx, key{}, t), t
}

// Phase adds the time since start to the named phase of ctx's collector, if
// it has one.
func Phase(ctx context.Context, name string, start time.Time) {
	t, ok := ctx.Value(key{}).(*Collector)
	if !ok {
		return
	}
	d := time.Since(start)
	t.mu.Lock()
	if _, seen := t.phases[name]; !seen {
		t.order = append(t.order, name)
	}
	t.phases[name] += d
	t.mu.Unlock()
}

// Describe notes how the request was served (a pool hit or a cold create).
func Describe(ctx context.Context, what string) {
	if t, ok := ctx.Value(key{}).(*Collector); ok {
		t.mu.Lock()
		t.desc = what
		t.mu.Unlock()
	}
}

// Total records the whole request's time since start, as the "total"
// entry.
func (t *Collector) Total(start time.Time) {
	d := time.Since(start)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.phases["total"]; !seen {
		t.order = append(t.order, "total")
	}
	t.phases["total"] = d
}

// Header renders the collected phases as a Server-Timing value, durations
// in milliseconds: "store;dur=0.8, engine;dur=310.2, agent;dur=40.1".
func (t *Collector) Header() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts := make([]string, 0, len(t.order)+1)
	for _, name := range t.order {
		parts = append(parts, fmt.Sprintf("%s;dur=%.3f", name, float64(t.phases[name].Microseconds())/1000))
	}
	if t.desc != "" {
		parts = append(parts, "create;desc="+t.desc)
	}
	return strings.Join(parts, ", ")
}
