package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

// claimStore is the method set the idempotency engine uses; both the SQLite
// store and the replicated claims have it.
type claimStore interface {
	ClaimIdempotentRequest(ctx context.Context, req sandpit.ClaimRequest, now time.Time) (sandpit.Claim, error)
	SetIdempotentTarget(ctx context.Context, scope, fingerprint string, generation int64, targetID string, now time.Time) error
	CompleteIdempotentRequest(ctx context.Context, c sandpit.Completion, now time.Time) error
	GetIdempotentRequest(ctx context.Context, scope, fingerprint string) (sandpit.Claim, error)
	DeleteIdempotentRequest(ctx context.Context, scope, fingerprint string) error
	RenewIdempotentClaim(ctx context.Context, scope, fingerprint string, generation int64, lockedUntil, now time.Time) error
}

var (
	_ claimStore = (*store.Store)(nil)
	_ claimStore = (*ClaimStore)(nil)
)

func openSQLite(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestClaimStoreMatchesSQLite runs one script of claim operations against
// the SQLite store and the replicated claims and requires the same outcome
// at every step.
func TestClaimStoreMatchesSQLite(t *testing.T) {
	reps := inmemCluster(t, 3)
	stores := map[string]claimStore{"sqlite": openSQLite(t), "raft": reps[1].Claims()}
	req := func(hash string) sandpit.ClaimRequest {
		return sandpit.ClaimRequest{Scope: "v1", Fingerprint: "key", RequestHash: hash, PendingTTL: time.Minute}
	}
	type step struct {
		do   func(ctx context.Context, s claimStore) (string, error)
		want string
	}
	claim := func(hash string, at time.Duration) func(context.Context, claimStore) (string, error) {
		return func(ctx context.Context, s claimStore) (string, error) {
			c, err := s.ClaimIdempotentRequest(ctx, req(hash), t0.Add(at))
			return fmt.Sprintf("%v/%d/%s", c.Outcome, c.Generation, c.TargetID), err
		}
	}
	steps := []step{
		{claim("h", 0), "acquired/1/"},
		{claim("h", time.Second), "in_flight/1/"},
		{claim("x", time.Second), "mismatch/1/"},
		{func(ctx context.Context, s claimStore) (string, error) {
			// The holder renews its lock past the original TTL...
			return "", s.RenewIdempotentClaim(ctx, "v1", "key", 1, t0.Add(90*time.Second), t0.Add(30*time.Second))
		}, ""},
		{claim("h", 70*time.Second), "in_flight/1/"}, // ...so it is still held after it
		{func(ctx context.Context, s claimStore) (string, error) {
			err := s.RenewIdempotentClaim(ctx, "v1", "key", 7, t0.Add(time.Hour), t0)
			if errors.Is(err, sandpit.ErrClaimLost) {
				return "lost", nil
			}
			return "", err
		}, "lost"},
		{func(ctx context.Context, s claimStore) (string, error) {
			return "", s.SetIdempotentTarget(ctx, "v1", "key", 1, "sb-1", t0)
		}, ""},
		{claim("h", 2*time.Minute), "acquired/1/sb-1"}, // lock expired: resumed
		{func(ctx context.Context, s claimStore) (string, error) {
			return "", s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: "v1", Fingerprint: "key", Generation: 1, ResponseStatus: 201, ResponseBody: []byte("b"), ReplayTTL: time.Hour}, t0.Add(2*time.Minute))
		}, ""},
		{func(ctx context.Context, s claimStore) (string, error) {
			err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: "v1", Fingerprint: "key", Generation: 1, ReplayTTL: time.Hour}, t0.Add(2*time.Minute))
			if errors.Is(err, sandpit.ErrClaimLost) {
				return "lost", nil
			}
			return "", err
		}, "lost"},
		{claim("h", 3*time.Minute), "replay/1/sb-1"},
		{claim("h", 3*time.Hour), "acquired/2/"}, // replay window over
		{func(ctx context.Context, s claimStore) (string, error) {
			return "", s.DeleteIdempotentRequest(ctx, "v1", "key")
		}, ""},
		{func(ctx context.Context, s claimStore) (string, error) {
			_, err := s.GetIdempotentRequest(ctx, "v1", "key")
			if errors.Is(err, sandpit.ErrNotFound) {
				return "gone", nil
			}
			return "", err
		}, "gone"},
	}
	ctx := context.Background()
	for i, st := range steps {
		for name, s := range stores {
			got, err := st.do(ctx, s)
			if err != nil {
				t.Fatalf("step %d on %s: %v", i, name, err)
			}
			if got != st.want {
				t.Fatalf("step %d on %s: %q, want %q", i, name, got, st.want)
			}
			if name == "raft" {
				// Reads on the proposing node see its committed writes
				// once applied; wait for that before the next step reads.
				waitDigests(t, reps)
			}
		}
	}
}

// BenchmarkClaimComplete measures one claim plus its completion, the write
// cost of an idempotent request: on the SQLite store, and through a three
// node Raft cluster over TLS on loopback, from the leader and from a
// follower.
func BenchmarkClaimComplete(b *testing.B) {
	run := func(b *testing.B, s claimStore) {
		ctx := context.Background()
		// Benchmarks run their body several times; each run needs new keys.
		prefix := newAttempt()
		b.ResetTimer()
		for i := range b.N {
			now := time.Now()
			key := fmt.Sprintf("%s-%d", prefix, i)
			c, err := s.ClaimIdempotentRequest(ctx, sandpit.ClaimRequest{Scope: "bench", Fingerprint: key, PendingTTL: time.Minute}, now)
			if err != nil || c.Outcome != sandpit.Acquired {
				b.Fatalf("claim: %v %v", c.Outcome, err)
			}
			if err := s.CompleteIdempotentRequest(ctx, sandpit.Completion{Scope: "bench", Fingerprint: key, Generation: c.Generation, ResponseStatus: 201, ResponseBody: []byte(`{"id":"x"}`), ReplayTTL: time.Hour}, now); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("sqlite", func(b *testing.B) { run(b, openSQLite(b)) })

	keys := testKeysB(b)
	var nodes []*tcpNode
	var servers []raft.Server
	for i := range 3 {
		n := startTCPNode(b, fmt.Sprintf("n%d", i+1), b.TempDir(), keys, "127.0.0.1:0")
		nodes = append(nodes, n)
		servers = append(servers, raft.Server{ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.mux.Addr().String())})
	}
	b.Cleanup(func() {
		for _, n := range nodes {
			n.stop()
		}
	})
	for _, n := range nodes {
		if err := n.rep.Bootstrap(servers); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := nodes[0].rep.WaitLeader(ctx); err != nil {
		b.Fatal(err)
	}
	var leader, follower *Replica
	for _, n := range nodes {
		if n.rep.IsLeader() {
			leader = n.rep
		} else {
			follower = n.rep
		}
	}
	b.Run("raft-leader", func(b *testing.B) { run(b, leader.Claims()) })
	b.Run("raft-follower", func(b *testing.B) { run(b, follower.Claims()) })
}

func testKeysB(b *testing.B) Keys {
	k, err := DeriveKeys([]byte("a cluster key of enough bytes"))
	if err != nil {
		b.Fatal(err)
	}
	return k
}
