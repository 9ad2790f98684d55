package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// countingStore is the real SQLite store with its reads counted, so a test can
// tell a waiter that was woken from one that polled.
type countingStore struct {
	*store.Store
	gets atomic.Int64
}

func (c *countingStore) GetIdempotentRequest(ctx context.Context, scope, key string) (sandpit.Claim, error) {
	c.gets.Add(1)
	return c.Store.GetIdempotentRequest(ctx, scope, key)
}

func openClaimStore(t testing.TB) *countingStore {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &countingStore{Store: st}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func idemReq(key string) idempotency.Request {
	return idempotency.Request{Scope: "test", Key: key, RequestHash: "h", PendingTTL: time.Minute, Wait: 10 * time.Second, ReplayTTL: time.Hour}
}

// slowOp answers after d, counting its runs.
func slowOp(runs *atomic.Int64, d time.Duration, body string) func(context.Context, *idempotency.Attempt) (idempotency.Response, error) {
	return func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
		runs.Add(1)
		time.Sleep(d)
		return idempotency.Response{Status: 201, Body: []byte(body), TargetID: "t-" + body}, nil
	}
}

func TestIdempotencyStormRunsOnce(t *testing.T) {
	st := openClaimStore(t)
	e := idempotency.New(st, nil, quietLog(), nil)
	var runs atomic.Int64
	const n = 100
	outcomes := make([]idempotency.Outcome, n)
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, out, err := e.Do(context.Background(), idemReq("k"), slowOp(&runs, 100*time.Millisecond, "one"))
			if err != nil {
				t.Error(err)
			}
			outcomes[i], bodies[i] = out, string(resp.Body)
		}()
	}
	wg.Wait()
	executed := 0
	for i := range n {
		if outcomes[i] == idempotency.Executed {
			executed++
		}
		if bodies[i] != "one" {
			t.Fatalf("caller %d got %q", i, bodies[i])
		}
	}
	if runs.Load() != 1 || executed != 1 {
		t.Fatalf("runs %d, executed %d: want 1 and 1", runs.Load(), executed)
	}
}

// TestIdempotencyWaiterWakeUp shows the two ways a duplicate waits: on a
// claim held in this process it is woken when the attempt ends and reads the
// row once per wake-up; on a claim held by another process (a second engine
// over the same store) it polls.
func TestIdempotencyWaiterWakeUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sameProc  bool
		wantPolls bool
	}{
		{"same process is woken", true, false},
		{"other process is polled", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openClaimStore(t)
			first := idempotency.New(st, nil, quietLog(), nil)
			dup := first
			if !tc.sameProc {
				dup = idempotency.New(st, nil, quietLog(), nil)
			}
			var runs atomic.Int64
			started := make(chan struct{})
			go func() {
				_, _, _ = first.Do(context.Background(), idemReq("k"), func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
					close(started)
					return slowOp(&runs, 600*time.Millisecond, "x")(ctx, a)
				})
			}()
			<-started
			resp, out, err := dup.Do(context.Background(), idemReq("k"), slowOp(&runs, 0, "y"))
			if err != nil || out != idempotency.Replayed || string(resp.Body) != "x" {
				t.Fatalf("duplicate: %q %v %v, want a replay of x", resp.Body, out, err)
			}
			gets := st.gets.Load()
			if polled := gets > 2; polled != tc.wantPolls {
				t.Fatalf("the duplicate read the claim %d times; polled = %v, want %v", gets, polled, tc.wantPolls)
			}
		})
	}
}

func TestIdempotencyAbandonedClaimIsClaimedAgain(t *testing.T) {
	st := openClaimStore(t)
	e := idempotency.New(st, nil, quietLog(), nil)
	started := make(chan struct{})
	errBoom := errors.New("boom")
	var firstErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _, firstErr = e.Do(context.Background(), idemReq("k"), func(context.Context, *idempotency.Attempt) (idempotency.Response, error) {
			close(started)
			time.Sleep(100 * time.Millisecond)
			return idempotency.Response{}, errBoom
		})
	}()
	<-started
	var runs atomic.Int64
	resp, out, err := e.Do(context.Background(), idemReq("k"), slowOp(&runs, 0, "second"))
	wg.Wait()
	if !errors.Is(firstErr, errBoom) {
		t.Fatalf("first: %v", firstErr)
	}
	if err != nil || out != idempotency.Executed || string(resp.Body) != "second" || runs.Load() != 1 {
		t.Fatalf("waiter after an abandoned attempt: %q %v %v runs %d, want it to run", resp.Body, out, err, runs.Load())
	}
}

func TestIdempotencyRefusals(t *testing.T) {
	st := openClaimStore(t)
	e := idempotency.New(st, nil, quietLog(), nil)
	var runs atomic.Int64
	if _, _, err := e.Do(context.Background(), idemReq("k"), slowOp(&runs, 0, "a")); err != nil {
		t.Fatal(err)
	}
	other := idemReq("k")
	other.RequestHash = "other"
	if _, _, err := e.Do(context.Background(), other, slowOp(&runs, 0, "b")); !errors.Is(err, idempotency.ErrKeyMismatch) {
		t.Fatalf("reused key: %v, want ErrKeyMismatch", err)
	}

	started := make(chan struct{})
	go func() {
		_, _, _ = e.Do(context.Background(), idemReq("slow"), func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
			close(started)
			return slowOp(&runs, 500*time.Millisecond, "s")(ctx, a)
		})
	}()
	<-started
	impatient := idemReq("slow")
	impatient.Wait = 50 * time.Millisecond
	if _, _, err := e.Do(context.Background(), impatient, slowOp(&runs, 0, "t")); !errors.Is(err, idempotency.ErrKeyInFlight) {
		t.Fatalf("impatient duplicate: %v, want ErrKeyInFlight", err)
	}
}

// TestIdempotencyStalledAttemptIsTakenOver: an attempt whose process died
// (its claim was made and given a target, then nothing renewed it) is taken
// over once its lock runs out, and the taker resumes it: same generation,
// same target, so nothing is made twice.
func TestIdempotencyStalledAttemptIsTakenOver(t *testing.T) {
	st := openClaimStore(t)
	e := idempotency.New(st, nil, quietLog(), nil)
	req := idemReq("k")
	req.PendingTTL = 100 * time.Millisecond
	ctx := context.Background()
	// The dead process's attempt, made straight in the store: no engine of
	// this process holds it or renews it.
	claim, err := st.ClaimIdempotentRequest(ctx, sandpit.ClaimRequest{Scope: req.Scope, Fingerprint: req.Key, RequestHash: req.RequestHash, PendingTTL: req.PendingTTL}, time.Now())
	if err != nil || claim.Outcome != sandpit.Acquired {
		t.Fatalf("dead attempt's claim: %+v %v", claim, err)
	}
	if err := st.SetIdempotentTarget(ctx, req.Scope, req.Key, claim.Generation, "target-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	var got *idempotency.Attempt
	_, out, err := e.Do(ctx, req, func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
		got = a
		return idempotency.Response{Status: 201, Body: []byte("second")}, nil
	})
	if err != nil || out != idempotency.Executed || got == nil || !got.Resumed() || got.TargetID != "target-1" || got.Generation != 1 {
		t.Fatalf("takeover: %v %v %+v, want a resumed attempt on target-1 at generation 1", out, err, got)
	}
}

// TestIdempotencyRunningAttemptKeepsItsClaim: an attempt that runs longer
// than its lock (a delete waiting on a slow engine) renews the claim, so a
// retry arriving after the lock would have run out waits for it and
// replays its answer instead of running the request a second time.
func TestIdempotencyRunningAttemptKeepsItsClaim(t *testing.T) {
	st := openClaimStore(t)
	e := idempotency.New(st, nil, quietLog(), nil)
	req := idemReq("k")
	// A lock long enough that a loaded machine (the suites run side by
	// side) renews it in time: renewals come every third of it.
	req.PendingTTL = time.Second
	var runs atomic.Int64
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = e.Do(context.Background(), req, func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
			runs.Add(1)
			close(started)
			time.Sleep(5 * req.PendingTTL)
			return idempotency.Response{Status: 204, Body: []byte("first")}, nil
		})
	}()
	<-started
	time.Sleep(2 * req.PendingTTL) // past the lock the first attempt began with
	resp, out, err := e.Do(context.Background(), req, func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
		runs.Add(1)
		return idempotency.Response{Status: 204, Body: []byte("second")}, nil
	})
	<-done
	if err != nil || out != idempotency.Replayed || string(resp.Body) != "first" || runs.Load() != 1 {
		t.Fatalf("retry: %v %v %q after %d runs, want the first attempt's answer replayed and one run", out, err, resp.Body, runs.Load())
	}
}

// BenchmarkIdempotencyStormWakeUp runs 100 identical calls at once against an
// operation that takes 50 ms and reports how long after the original's answer
// the duplicates get theirs.
func BenchmarkIdempotencyStormWakeUp(b *testing.B) {
	st := openClaimStore(b)
	e := idempotency.New(st, nil, quietLog(), nil)
	var lag []time.Duration
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("storm-%d", i)
		var runs atomic.Int64
		var mu sync.Mutex
		var origEnd time.Time
		ends := make([]time.Time, 0, 100)
		var wg sync.WaitGroup
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, out, err := e.Do(context.Background(), idemReq(key), slowOp(&runs, 50*time.Millisecond, "x"))
				end := time.Now()
				if err != nil {
					b.Error(err)
				}
				mu.Lock()
				if out == idempotency.Executed {
					origEnd = end
				} else {
					ends = append(ends, end)
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, end := range ends {
			lag = append(lag, end.Sub(origEnd))
		}
	}
	sort.Slice(lag, func(i, j int) bool { return lag[i] < lag[j] })
	b.ReportMetric(float64(lag[len(lag)/2].Microseconds())/1000, "dup-lag-p50-ms")
	b.ReportMetric(float64(lag[len(lag)*99/100].Microseconds())/1000, "dup-lag-p99-ms")
}
