package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

func TestRevokePreviewToken(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	revoked := func(tok string) bool {
		t.Helper()
		ok, err := s.PreviewTokenRevoked(ctx, tok)
		if err != nil {
			t.Fatalf("PreviewTokenRevoked(%s): %v", tok, err)
		}
		return ok
	}
	if revoked("tok-1") {
		t.Fatal("a token nobody revoked reads as revoked")
	}
	for range 2 { // the second is a retry: still one row, no error
		if err := s.RevokePreviewToken(ctx, "sb-a", "tok-1", t0.Add(time.Hour), t0); err != nil {
			t.Fatalf("RevokePreviewToken: %v", err)
		}
	}
	if !revoked("tok-1") {
		t.Fatal("tok-1 not revoked")
	}
	if err := s.RevokePreviewToken(ctx, "sb-missing", "tok-2", t0.Add(time.Hour), t0); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("revoke for an unknown sandbox: %v, want ErrNotFound", err)
	}
	if revoked("tok-2") {
		t.Fatal("a refused revocation left a row")
	}

	// A later revocation prunes rows whose tokens have expired on their own.
	if err := s.RevokePreviewToken(ctx, "sb-a", "tok-3", t0.Add(3*time.Hour), t0.Add(2*time.Hour)); err != nil {
		t.Fatalf("RevokePreviewToken: %v", err)
	}
	if revoked("tok-1") || !revoked("tok-3") {
		t.Fatal("expired revocation not pruned, or the new one missing")
	}

	// Revocations go with their sandbox.
	if err := s.DeleteSandbox(ctx, "sb-a"); err != nil {
		t.Fatal(err)
	}
	if revoked("tok-3") {
		t.Fatal("a deleted sandbox's revocation remains")
	}
}

func TestListPreviewRevocations(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	createSandbox(t, s, "sb-b", "")
	for _, r := range []struct {
		sb, tok string
		exp     time.Duration
		at      time.Duration
	}{
		{"sb-a", "tok-late", 3 * time.Hour, 0},
		{"sb-a", "tok-soon", 30 * time.Minute, time.Minute},
		{"sb-b", "tok-other", time.Hour, 2 * time.Minute},
	} {
		if err := s.RevokePreviewToken(ctx, r.sb, r.tok, t0.Add(r.exp), t0.Add(r.at)); err != nil {
			t.Fatal(err)
		}
	}
	tokens := func(now time.Time) []string {
		t.Helper()
		list, err := s.ListPreviewRevocations(ctx, "sb-a", now)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range list {
			out = append(out, r.Token)
		}
		return out
	}
	// Only sb-a's, oldest revocation first, each with its expiry.
	if got := tokens(t0); len(got) != 2 || got[0] != "tok-late" || got[1] != "tok-soon" {
		t.Fatalf("revocations of sb-a: %v, want [tok-late tok-soon]", got)
	}
	list, _ := s.ListPreviewRevocations(ctx, "sb-a", t0)
	if !list[0].ExpiresAt.Equal(t0.Add(3 * time.Hour)) {
		t.Fatalf("expiry %v, want %v", list[0].ExpiresAt, t0.Add(3*time.Hour))
	}
	// A token that has expired on its own needs no revocation any more.
	if got := tokens(t0.Add(time.Hour)); len(got) != 1 || got[0] != "tok-late" {
		t.Fatalf("revocations of sb-a an hour on: %v, want [tok-late]", got)
	}
	if got := tokens(t0.Add(4 * time.Hour)); len(got) != 0 {
		t.Fatalf("revocations of sb-a after every expiry: %v", got)
	}
}
