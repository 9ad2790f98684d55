package service

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
)

// Defaults of the metrics history.
const (
	// DefaultMetricsInterval is how often every running sandbox is sampled,
	// as often as E2B samples its sandboxes.
	DefaultMetricsInterval = 5 * time.Second
	// DefaultMetricsSamples bounds each sandbox's history: an hour at the
	// default interval.
	DefaultMetricsSamples = 720
	// metricsConcurrency bounds the engine stats calls in flight at once;
	// each waits about a second for the engine's CPU delta.
	metricsConcurrency = 4
)

// MetricsHistory keeps the last samples of every running sandbox's
// resource use in memory, so a client can ask for a time window (E2B's
// getMetrics start/end) rather than only "now". It is bounded twice: per
// sandbox by the sample count, and overall by dropping the history of a
// sandbox once it has not been sampled for as long as a full history spans
// (it was deleted, or stays paused).
type MetricsHistory struct {
	svc      *Service
	interval time.Duration
	max      int

	mu      sync.Mutex
	samples map[string][]driver.Stats // oldest first
}

// NewMetricsHistory makes a history of svc's sandboxes, sampled every
// interval (default DefaultMetricsInterval), keeping at most max samples per
// sandbox (default DefaultMetricsSamples).
func NewMetricsHistory(svc *Service, interval time.Duration, max int) *MetricsHistory {
	if interval <= 0 {
		interval = DefaultMetricsInterval
	}
	if max <= 0 {
		max = DefaultMetricsSamples
	}
	return &MetricsHistory{svc: svc, interval: interval, max: max, samples: map[string][]driver.Stats{}}
}

// Run samples every running sandbox each interval until ctx ends. A round
// that takes longer than the interval delays the next rather than piling up.
func (h *MetricsHistory) Run(ctx context.Context) {
	for {
		h.SampleAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.interval):
		}
	}
}

// SampleAll takes one sample of every running sandbox and forgets the
// sandboxes that have not been sampled for a full history's span.
func (h *MetricsHistory) SampleAll(ctx context.Context) {
	var ids []string
	opts := sandpit.ListOptions{States: []sandpit.State{sandpit.StateRunning}, Limit: 1000}
	for {
		page, next, err := h.svc.ListSandboxes(ctx, opts)
		if err != nil {
			if ctx.Err() == nil {
				h.svc.log.Warn("metrics: list sandboxes", "err", err)
			}
			return
		}
		for _, sb := range page {
			ids = append(ids, sb.ID)
		}
		if next == "" {
			break
		}
		opts.PageToken = next
	}
	sem := make(chan struct{}, metricsConcurrency)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			// A sandbox deleted or stopped meanwhile simply has no sample.
			_, _ = h.Sample(ctx, id)
		})
	}
	wg.Wait()
	h.prune(h.svc.now().Add(-time.Duration(h.max) * h.interval))
}

// Sample takes one sample of a sandbox now and records it.
func (h *MetricsHistory) Sample(ctx context.Context, id string) (driver.Stats, error) {
	st, err := h.svc.Stats(ctx, id)
	if err != nil {
		return st, err
	}
	if st.Timestamp.IsZero() {
		st.Timestamp = h.svc.now()
	}
	h.record(id, st)
	return st, nil
}

func (h *MetricsHistory) record(id string, st driver.Stats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.samples[id]
	if n := len(s); n > 0 && !st.Timestamp.After(s[n-1].Timestamp) {
		return // a concurrent sample got there first
	}
	s = append(s, st)
	if len(s) > h.max {
		s = slices.Delete(s, 0, len(s)-h.max)
	}
	h.samples[id] = s
}

// prune forgets every sandbox whose newest sample is older than cutoff.
func (h *MetricsHistory) prune(cutoff time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, s := range h.samples {
		if len(s) == 0 || s[len(s)-1].Timestamp.Before(cutoff) {
			delete(h.samples, id)
		}
	}
}

// Window returns the recorded samples of a sandbox taken within
// [start, end], oldest first; a zero bound is open. A sandbox the service
// does not know is sandpit.ErrNotFound.
func (h *MetricsHistory) Window(ctx context.Context, id string, start, end time.Time) ([]driver.Stats, error) {
	if _, err := h.svc.GetSandbox(ctx, id); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []driver.Stats{}
	for _, st := range h.samples[id] {
		if (start.IsZero() || !st.Timestamp.Before(start)) && (end.IsZero() || !st.Timestamp.After(end)) {
			out = append(out, st)
		}
	}
	return out, nil
}
