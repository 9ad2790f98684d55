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
