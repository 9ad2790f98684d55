package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

// TestQuotaDecidedInTheInsertTransaction: many creates racing for an owner's
// last slots; exactly the limit succeed and the rest are refused with
// ErrQuotaExceeded, because usage is read and the row inserted under one
// write lock. Other owners are not counted.
func TestQuotaDecidedInTheInsertTransaction(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	if err := s.CreateSandbox(ctx, sandpit.Sandbox{ID: "sb-other", Owner: "bob"}); err != nil {
		t.Fatal(err)
	}
	limits := sandpit.OwnerLimits{Owner: "alice", MaxSandboxes: 3, MaxCPU: 10}
	var wg sync.WaitGroup
	errs := make([]error, 12)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CreateSandboxWithinLimits(ctx, sandpit.Sandbox{ID: fmt.Sprintf("sb-%d", i), Owner: "alice", CPU: 1}, limits, 0)
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, sandpit.ErrQuotaExceeded):
			refused++
		default:
			t.Fatal(err)
		}
	}
	if ok != 3 || refused != 9 {
		t.Fatalf("%d created, %d refused; want 3 and 9", ok, refused)
	}
	u, err := s.GetOwnerUsage(ctx, "alice")
	if err != nil || u.Sandboxes != 3 || u.CPU != 3 {
		t.Fatalf("usage %+v %v", u, err)
	}
	// The CPU limit names itself.
	err = s.CreateSandboxWithinLimits(ctx, sandpit.Sandbox{ID: "sb-big", Owner: "carol", CPU: 11}, limits, 0)
	if !errors.Is(err, sandpit.ErrQuotaExceeded) || !strings.Contains(err.Error(), "max_cpu") {
		t.Fatalf("over the cpu limit: %v", err)
	}
}

// TestTokenLifecycle: a live name is unique, revocation frees it, and the
// stored row holds the hash it was given.
func TestTokenLifecycle(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	sum := sha256.Sum256([]byte("spt_x"))
	tok := sandpit.Token{Prefix: "aaaaaaaaaaaa", Name: "ci", Owner: "team", Scopes: []string{"sandboxes:write"}, SecretHash: sum[:], CreatedAt: t0}
	if err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	tok2 := tok
	tok2.Prefix = "bbbbbbbbbbbb"
	if err := s.CreateToken(ctx, tok2); !errors.Is(err, store.ErrTokenNameTaken) {
		t.Fatalf("second live token named ci: %v", err)
	}
	if _, err := s.RevokeToken(ctx, "ci", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeToken(ctx, "ci", t0.Add(time.Minute)); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("revoking twice: %v", err)
	}
	if err := s.CreateToken(ctx, tok2); err != nil {
		t.Fatalf("reusing a revoked token's name: %v", err)
	}
	got, err := s.GetTokenByPrefix(ctx, "aaaaaaaaaaaa")
	if err != nil || got.RevokedAt.IsZero() || string(got.SecretHash) != string(sum[:]) {
		t.Fatalf("revoked token row: %+v %v", got, err)
	}
	all, err := s.ListTokens(ctx, true)
	if err != nil || len(all) != 2 {
		t.Fatalf("list with revoked: %d %v", len(all), err)
	}
	live, err := s.ListTokens(ctx, false)
	if err != nil || len(live) != 1 || live[0].Prefix != "bbbbbbbbbbbb" {
		t.Fatalf("live tokens: %+v %v", live, err)
	}
}

// TestAuditLogIsAppendOnly: entries cannot be updated, and only retention
// deletes them, oldest first.
func TestAuditLogIsAppendOnly(t *testing.T) {
	s, dir := openStore(t)
	ctx := context.Background()
	for i, at := range []time.Time{t0, t0.Add(time.Hour)} {
		if err := s.AppendAudit(ctx, sandpit.AuditEntry{At: at, TokenName: "ci", Owner: "team", Action: "sandbox.create", Resource: fmt.Sprint(i), Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	db := rawDB(t, dir, false)
	if _, err := db.Exec(`UPDATE audit_log SET outcome = 'forged'`); err == nil {
		t.Fatal("an audit entry was updated")
	}
	db.Close()
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.ReapAudit(ctx, t0.Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	es, err := s.ListAudit(ctx, sandpit.AuditQuery{})
	if err != nil || len(es) != 1 || es[0].Resource != "1" {
		t.Fatalf("after retention: %+v %v", es, err)
	}
}
