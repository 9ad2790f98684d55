package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

const (
	pendingTTL = 2 * time.Minute
	replayTTL  = 10 * time.Second
)

func claimReq(fp, hash string) sandpit.ClaimRequest {
	return sandpit.ClaimRequest{Scope: "e2b.create", Fingerprint: fp, RequestHash: hash, PendingTTL: pendingTTL}
}

// claimAll has n goroutines claim req at the same time and counts outcomes.
func claimAll(t *testing.T, s *store.Store, n int, req sandpit.ClaimRequest, now time.Time) ([]sandpit.Claim, map[sandpit.ClaimOutcome]int) {
	t.Helper()
	claims := make([]sandpit.Claim, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		claims[i], errs[i] = s.ClaimIdempotentRequest(context.Background(), req, now)
	})
	counts := map[sandpit.ClaimOutcome]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claimer %d: %v", i, errs[i])
		}
		counts[claims[i].Outcome]++
	}
	return claims, counts
}

func acquired(claims []sandpit.Claim) sandpit.Claim {
	for _, c := range claims {
		if c.Outcome == sandpit.Acquired {
			return c
		}
	}
	return sandpit.Claim{}
}

func TestClaimLifecycleUnderContention(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	req := claimReq("fp-1", "")

	// 64 concurrent first claims: one owner, the rest see it in flight.
	claims, counts := claimAll(t, s, 64, req, t0)
	if counts[sandpit.Acquired] != 1 || counts[sandpit.InFlight] != 63 {
		t.Fatalf("first round: %v, want 1 acquired and 63 in flight", counts)
	}
	owner := acquired(claims)
	if owner.Generation != 1 || owner.State != "pending" || !owner.LockedUntil.Equal(t0.Add(pendingTTL)) {
		t.Fatalf("owner claim %+v", owner)
	}

	done := t0.Add(5 * time.Second)
	if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{
		Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: owner.Generation,
		TargetID: "sb-first", ResponseStatus: 201, ResponseBody: []byte(`{"id":"sb-first"}`), ReplayTTL: replayTTL,
	}, done); err != nil {
		t.Fatalf("Complete: %v", err)
	}

	// Within the replay window every duplicate replays the same outcome.
	for _, now := range []time.Time{done, done.Add(replayTTL - time.Nanosecond)} {
		claims, counts = claimAll(t, s, 64, req, now)
		if counts[sandpit.Replay] != 64 {
			t.Fatalf("within the window at %v: %v, want 64 replays", now, counts)
		}
		for _, c := range claims {
			if c.TargetID != "sb-first" || c.ResponseStatus != 201 || string(c.ResponseBody) != `{"id":"sb-first"}` || c.Generation != 1 {
				t.Fatalf("replay %+v", c)
			}
		}
	}

	// After the window exactly one caller starts generation 2.
	later := done.Add(replayTTL)
	claims, counts = claimAll(t, s, 64, req, later)
	if counts[sandpit.Acquired] != 1 || counts[sandpit.InFlight] != 63 {
		t.Fatalf("after the window: %v, want 1 acquired and 63 in flight", counts)
	}
	gen2 := acquired(claims)
	if gen2.Generation != 2 || gen2.TargetID != "" || gen2.ResponseBody != nil || gen2.State != "pending" {
		t.Fatalf("generation 2 claim %+v", gen2)
	}
	row, err := s.GetIdempotentRequest(ctx, req.Scope, req.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	if row.Generation != 2 || row.TargetID != "" || row.ResponseStatus != 0 || row.ResponseBody != nil || !row.ReplayUntil.IsZero() || row.Outcome != 0 {
		t.Fatalf("row after reset %+v", row)
	}

	// The generation-1 owner can no longer complete; generation 2 can.
	if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: 1, TargetID: "late", ReplayTTL: replayTTL}, later); !errors.Is(err, sandpit.ErrClaimLost) {
		t.Fatalf("stale completion: got %v, want sandpit.ErrClaimLost", err)
	}
	if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: 2, TargetID: "sb-second", ReplayTTL: replayTTL}, later); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.ClaimIdempotentRequest(ctx, req, later); c.Outcome != sandpit.Replay || c.TargetID != "sb-second" {
		t.Fatalf("replay of generation 2: %+v", c)
	}
}

func TestClaimExpiredPendingIsTakenOverByOne(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	req := claimReq("fp-crash", "h1")
	first, err := s.ClaimIdempotentRequest(ctx, req, t0)
	if err != nil || first.Outcome != sandpit.Acquired {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	if err := s.SetIdempotentTarget(ctx, req.Scope, req.Fingerprint, first.Generation, "sb-crashed", t0); err != nil {
		t.Fatal(err)
	}
	// The worker dies. Up to the lock's expiry everyone waits.
	if _, counts := claimAll(t, s, 64, req, t0.Add(pendingTTL-time.Nanosecond)); counts[sandpit.InFlight] != 64 {
		t.Fatalf("before the lock expires: %v", counts)
	}
	takeover := t0.Add(pendingTTL)
	claims, counts := claimAll(t, s, 64, req, takeover)
	if counts[sandpit.Acquired] != 1 || counts[sandpit.InFlight] != 63 {
		t.Fatalf("after the lock expires: %v, want 1 acquired and 63 in flight", counts)
	}
	c := acquired(claims)
	if c.Generation != 1 || c.TargetID != "sb-crashed" || !c.LockedUntil.Equal(takeover.Add(pendingTTL)) || c.RequestHash != "h1" {
		t.Fatalf("takeover claim %+v: want generation 1, target sb-crashed and a fresh lock", c)
	}
	for _, other := range claims {
		if other.Outcome == sandpit.InFlight && !other.LockedUntil.Equal(takeover.Add(pendingTTL)) {
			t.Fatalf("in-flight claimers should see the renewed lock, got %+v", other)
		}
	}
	// The new holder completes without naming the target again.
	if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: 1, ReplayTTL: replayTTL}, takeover); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.ClaimIdempotentRequest(ctx, req, takeover); r.Outcome != sandpit.Replay || r.TargetID != "sb-crashed" {
		t.Fatalf("replay after takeover: %+v", r)
	}
}

func TestClaimRequestHashMismatch(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	a, b := claimReq("key-1", "hash-a"), claimReq("key-1", "hash-b")
	if c, err := s.ClaimIdempotentRequest(ctx, a, t0); err != nil || c.Outcome != sandpit.Acquired {
		t.Fatalf("claim a: %+v %v", c, err)
	}

	check := func(name string, req sandpit.ClaimRequest, now time.Time, want sandpit.ClaimOutcome) sandpit.Claim {
		t.Helper()
		c, err := s.ClaimIdempotentRequest(ctx, req, now)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Outcome != want {
			t.Fatalf("%s: outcome %v, want %v (%+v)", name, c.Outcome, want, c)
		}
		return c
	}
	check("other hash while pending", b, t0, sandpit.Mismatch)
	check("other hash, lock expired", b, t0.Add(pendingTTL), sandpit.Mismatch)
	if row, _ := s.GetIdempotentRequest(ctx, a.Scope, a.Fingerprint); row.RequestHash != "hash-a" || !row.LockedUntil.Equal(t0.Add(pendingTTL)) {
		t.Fatalf("a mismatch changed the row: %+v", row)
	}
	check("same hash while pending", a, t0, sandpit.InFlight)
	check("no hash while pending", claimReq("key-1", ""), t0, sandpit.InFlight)

	if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: a.Scope, Fingerprint: a.Fingerprint, Generation: 1, TargetID: "sb-a", ResponseStatus: 200, ReplayTTL: replayTTL}, t0); err != nil {
		t.Fatal(err)
	}
	check("other hash during replay", b, t0.Add(time.Second), sandpit.Mismatch)
	check("same hash during replay", a, t0.Add(time.Second), sandpit.Replay)
	// Once the replay window closes the key is free for a new request.
	c := check("other hash after replay window", b, t0.Add(replayTTL), sandpit.Acquired)
	if c.Generation != 2 || c.RequestHash != "hash-b" {
		t.Fatalf("new request's claim %+v", c)
	}
	check("first hash now mismatches", a, t0.Add(replayTTL), sandpit.Mismatch)
}

func TestIdempotencyClaimLost(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	req := claimReq("fp-lost", "")
	c, err := s.ClaimIdempotentRequest(ctx, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"target, wrong generation", s.SetIdempotentTarget(ctx, req.Scope, req.Fingerprint, c.Generation+1, "x", t0)},
		{"target, unknown row", s.SetIdempotentTarget(ctx, req.Scope, "nope", 1, "x", t0)},
		{"complete, wrong generation", s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: 7}, t0)},
		{"complete, unknown row", s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: "other", Fingerprint: req.Fingerprint, Generation: 1}, t0)},
	} {
		if !errors.Is(tc.err, sandpit.ErrClaimLost) {
			t.Errorf("%s: got %v, want sandpit.ErrClaimLost", tc.name, tc.err)
		}
	}
	if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: 1, TargetID: "t", ReplayTTL: replayTTL}, t0); err != nil {
		t.Fatal(err)
	}
	// A ready row is no longer a claim anyone holds.
	if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: 1, TargetID: "t2", ReplayTTL: replayTTL}, t0); !errors.Is(err, sandpit.ErrClaimLost) {
		t.Errorf("second completion: got %v, want sandpit.ErrClaimLost", err)
	}
	if err := s.SetIdempotentTarget(ctx, req.Scope, req.Fingerprint, 1, "t3", t0); !errors.Is(err, sandpit.ErrClaimLost) {
		t.Errorf("target after completion: got %v, want sandpit.ErrClaimLost", err)
	}

	// Delete is the rollback path: idempotent, and the next claim starts over.
	for range 2 {
		if err := s.DeleteIdempotentRequest(ctx, req.Scope, req.Fingerprint); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.GetIdempotentRequest(ctx, req.Scope, req.Fingerprint); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("Get after delete: %v", err)
	}
	if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: 1}, t0); !errors.Is(err, sandpit.ErrClaimLost) {
		t.Errorf("complete after delete: %v", err)
	}
	if c, _ := s.ClaimIdempotentRequest(ctx, req, t0); c.Outcome != sandpit.Acquired || c.Generation != 1 {
		t.Errorf("claim after delete: %+v", c)
	}
}

func TestClaimScopesAreSeparate(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for _, scope := range []string{"e2b.create", "daytona.create"} {
		c, err := s.ClaimIdempotentRequest(ctx, sandpit.ClaimRequest{Scope: scope, Fingerprint: "same", PendingTTL: time.Minute}, t0)
		if err != nil || c.Outcome != sandpit.Acquired {
			t.Fatalf("scope %s: %+v %v", scope, c, err)
		}
	}
	for _, bad := range []sandpit.ClaimRequest{
		{Scope: "", Fingerprint: "f", PendingTTL: time.Minute},
		{Scope: "s", Fingerprint: "", PendingTTL: time.Minute},
		{Scope: "s", Fingerprint: "f"},
	} {
		if _, err := s.ClaimIdempotentRequest(ctx, bad, t0); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestReapIdempotentRequests(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	now := t0.Add(time.Hour)
	// Each row is claimed at claimedAt with lockTTL and, if completed, gets a
	// replay window of replay from completedAt.
	rows := []struct {
		fp          string
		claimedAt   time.Time
		lockTTL     time.Duration
		complete    bool
		completedAt time.Time
		replay      time.Duration
		kept        bool
	}{
		{fp: "pending-live", claimedAt: now.Add(-time.Minute), lockTTL: 2 * time.Minute, kept: true},
		{fp: "pending-lock-ends-now", claimedAt: now.Add(-time.Minute), lockTTL: time.Minute, kept: true},
		{fp: "pending-stale", claimedAt: now.Add(-10 * time.Minute), lockTTL: time.Minute, kept: false},
		{fp: "ready-replaying", claimedAt: now.Add(-10 * time.Minute), lockTTL: time.Minute, complete: true, completedAt: now.Add(-time.Second), replay: time.Minute, kept: true},
		{fp: "ready-replay-over-lock-live", claimedAt: now.Add(-time.Minute), lockTTL: 2 * time.Minute, complete: true, completedAt: now.Add(-time.Minute), replay: time.Second, kept: true},
		{fp: "ready-past-both", claimedAt: now.Add(-10 * time.Minute), lockTTL: time.Minute, complete: true, completedAt: now.Add(-9 * time.Minute), replay: time.Second, kept: false},
	}
	for _, r := range rows {
		c, err := s.ClaimIdempotentRequest(ctx, sandpit.ClaimRequest{Scope: "s", Fingerprint: r.fp, PendingTTL: r.lockTTL}, r.claimedAt)
		if err != nil {
			t.Fatal(err)
		}
		if r.complete {
			if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: "s", Fingerprint: r.fp, Generation: c.Generation, TargetID: "x", ReplayTTL: r.replay}, r.completedAt); err != nil {
				t.Fatal(err)
			}
		}
	}
	n, err := s.ReapIdempotentRequests(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("reaped %d rows, want 2", n)
	}
	for _, r := range rows {
		_, err := s.GetIdempotentRequest(ctx, "s", r.fp)
		if kept := err == nil; kept != r.kept {
			t.Errorf("%s: kept=%v, want %v (err %v)", r.fp, kept, r.kept, err)
		}
	}
	if n, _ := s.ReapIdempotentRequests(ctx, now); n != 0 {
		t.Errorf("second reap deleted %d rows", n)
	}
}

// TestExpirePendingClaims plays a daemon restart: the rows the dead process
// left pending are taken over at once by the next claim, with the target the
// dead attempt recorded, and the reaper keeps them for the whole window, while
// a completed row is left exactly as it was.
func TestExpirePendingClaims(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	restart := t0.Add(30 * time.Second)
	const keep = time.Hour

	rows := []struct {
		fp       string
		claimAt  time.Time
		target   string
		complete bool
	}{
		// Claimed just before the crash: the lock would hold for 90 s more.
		{fp: "lock-live", claimAt: t0, target: "sb-half-made"},
		// Claimed so long before the restart that the lock has run out
		// already; without the window the reaper would delete it.
		{fp: "lock-run-out", claimAt: t0.Add(-10 * time.Minute), target: "sb-older"},
		// Finished before the crash: not a claim anyone holds.
		{fp: "ready", claimAt: t0, target: "sb-done", complete: true},
	}
	for _, r := range rows {
		c, err := s.ClaimIdempotentRequest(ctx, claimReq(r.fp, "h-"+r.fp), r.claimAt)
		if err != nil || c.Outcome != sandpit.Acquired {
			t.Fatalf("claim %s: %+v %v", r.fp, c, err)
		}
		if err := s.SetIdempotentTarget(ctx, c.Scope, c.Fingerprint, c.Generation, r.target, r.claimAt); err != nil {
			t.Fatal(err)
		}
		if r.complete {
			if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: c.Scope, Fingerprint: c.Fingerprint, Generation: c.Generation,
				ResponseStatus: 201, ResponseBody: []byte(`{}`), ReplayTTL: replayTTL}, r.claimAt); err != nil {
				t.Fatal(err)
			}
		}
	}
	before, err := s.GetIdempotentRequest(ctx, "e2b.create", "ready")
	if err != nil {
		t.Fatal(err)
	}

	if _, err := s.ExpirePendingClaims(ctx, restart, -time.Second); err == nil {
		t.Fatal("a negative keep was accepted")
	}
	n, err := s.ExpirePendingClaims(ctx, restart, keep)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("expired %d rows, want the 2 pending ones", n)
	}
	if after, _ := s.GetIdempotentRequest(ctx, "e2b.create", "ready"); !after.ReplayUntil.Equal(before.ReplayUntil) ||
		!after.LockedUntil.Equal(before.LockedUntil) || after.State != "ready" {
		t.Fatalf("the ready row changed: %+v, was %+v", after, before)
	}

	// A retry right at the restart takes the dead attempt over: no wait for
	// the old lock, the same generation and the same target.
	check := func(fp, target string, now time.Time) {
		t.Helper()
		c, err := s.ClaimIdempotentRequest(ctx, claimReq(fp, "h-"+fp), now)
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome != sandpit.Acquired || c.Generation != 1 || c.TargetID != target {
			t.Errorf("%s: retry got %+v, want acquired at generation 1 with target %s", fp, c, target)
		}
	}
	check("lock-live", "sb-half-made", restart)

	// The reaper runs before anyone retries the other key; the window keeps
	// its row, and the ready row, whose replay ended long ago, goes.
	late := restart.Add(keep - time.Second)
	if _, err := s.ReapIdempotentRequests(ctx, late); err != nil {
		t.Fatal(err)
	}
	check("lock-run-out", "sb-older", late)
	if _, err := s.GetIdempotentRequest(ctx, "e2b.create", "ready"); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("ready row past its replay window: %v, want reaped", err)
	}
}
