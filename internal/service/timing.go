package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ServerTiming collects the phases of one request (store, engine, agent) for
// its Server-Timing header, so users and benchmarks see where a create's
// time goes.
type ServerTiming struct {
	mu     sync.Mutex
	order  []string
	phases map[string]time.Duration
	desc   string
}

type timingKey struct{}

// WithServerTiming returns a context whose service calls record their phases
// into the returned collector.
func WithServerTiming(ctx context.Context) (context.Context, *ServerTiming) {
	t := &ServerTiming{phases: map[string]time.Duration{}}
	return context.WithValue(ctx, timingKey{}, t), t
}

// phase adds the time since start to the named phase of ctx's collector, if
// it has one.
func phase(ctx context.Context, name string, start time.Time) {
	t, ok := ctx.Value(timingKey{}).(*ServerTiming)
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

// describe notes how the request was served (a pool hit or a cold create).
func describe(ctx context.Context, what string) {
	if t, ok := ctx.Value(timingKey{}).(*ServerTiming); ok {
		t.mu.Lock()
		t.desc = what
		t.mu.Unlock()
	}
}

// Total records the whole request's time since start, as the "total"
// entry.
func (t *ServerTiming) Total(start time.Time) {
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
func (t *ServerTiming) Header() string {
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
