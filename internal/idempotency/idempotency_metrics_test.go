package idempotency_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/metrics"
)

// counter reads one series of a counter family.
func counter(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := m.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			sum += s.GetCounter().GetValue()
		}
	}
	return sum
}

// TestIdempotencyMetrics: the engine counts each claim outcome under the
// base scope (never the owner), and a create scope's duplicates count as
// creates: replayed when the first had finished, deduplicated when it was
// still running.
func TestIdempotencyMetrics(t *testing.T) {
	const scope = "v1:POST /v1/sandboxes"
	m := metrics.New(scope)
	st := openClaimStore(t)
	e := idempotency.New(st.Store, nil, quietLog(), m)
	ctx := sandpit.WithPrincipal(context.Background(), sandpit.Principal{Owner: "alice", Scopes: []string{sandpit.ScopeSandboxesWrite}})
	req := idempotency.Request{Scope: idempotency.OwnerScope(scope, "alice"), Key: "k1", RequestHash: "h", PendingTTL: time.Minute, Wait: 10 * time.Second, ReplayTTL: time.Hour}

	// A first attempt held in flight while a duplicate arrives.
	var runs atomic.Int64
	release := make(chan struct{})
	entered := make(chan struct{})
	op := func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
		runs.Add(1)
		close(entered)
		<-release
		return idempotency.Response{Status: 201, Body: []byte(`{}`), TargetID: "sb1"}, nil
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _, _ = e.Do(ctx, req, op) }()
	<-entered
	go func() {
		defer wg.Done()
		if _, out, err := e.Do(ctx, req, op); err != nil || out != idempotency.Replayed {
			t.Errorf("duplicate in flight: %v %v", out, err)
		}
	}()
	// Let the duplicate find the claim in flight before the first ends.
	for counter(t, m, "sandpit_idempotency_outcomes_total", map[string]string{"outcome": metrics.IdemInFlight}) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	// A later retry replays; the same key with another body mismatches.
	if _, out, err := e.Do(ctx, req, op); err != nil || out != idempotency.Replayed {
		t.Fatalf("retry: %v %v", out, err)
	}
	bad := req
	bad.RequestHash = "other"
	if _, _, err := e.Do(ctx, bad, op); !errors.Is(err, idempotency.ErrKeyMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	// Another scope counts apart and is not a create.
	other := idempotency.Request{Scope: idempotency.OwnerScope("v1:POST /v1/sandboxes/{id}/ports", "alice"), Key: "k1", RequestHash: "h", Wait: time.Second, PendingTTL: time.Minute, ReplayTTL: time.Hour}
	if _, _, err := e.Do(ctx, other, func(context.Context, *idempotency.Attempt) (idempotency.Response, error) {
		return idempotency.Response{Status: 201, Body: []byte(`{}`)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	_, _, _ = e.Do(ctx, other, nil)

	if runs.Load() != 1 {
		t.Fatalf("op ran %d times", runs.Load())
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"acquired", map[string]string{"scope": scope, "outcome": metrics.IdemAcquired}, 1},
		{"in flight", map[string]string{"scope": scope, "outcome": metrics.IdemInFlight}, 1},
		{"replay", map[string]string{"scope": scope, "outcome": metrics.IdemReplay}, 1},
		{"mismatch", map[string]string{"scope": scope, "outcome": metrics.IdemMismatch}, 1},
		{"other scope acquired", map[string]string{"scope": "v1:POST /v1/sandboxes/{id}/ports", "outcome": metrics.IdemAcquired}, 1},
		{"other scope replay", map[string]string{"scope": "v1:POST /v1/sandboxes/{id}/ports", "outcome": metrics.IdemReplay}, 1},
	} {
		if got := counter(t, m, "sandpit_idempotency_outcomes_total", tc.labels); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	for path, want := range map[string]float64{metrics.PathReplayed: 1, metrics.PathDeduplicated: 1, metrics.PathCold: 0, metrics.PathWarm: 0} {
		if got := counter(t, m, "sandpit_creates_total", map[string]string{"path": path}); got != want {
			t.Errorf("creates{path=%s} = %v, want %v", path, got, want)
		}
	}
}
