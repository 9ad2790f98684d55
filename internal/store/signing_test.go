package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// TestSigningKey: racing first asks for a sandbox's signing key store one
// key, and every one of them gets it; a rotation replaces it; a deleted or
// unknown sandbox has none.
func TestSigningKey(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-1", "")
	if k, err := s.SigningKey(ctx, "sb-1"); err != nil || k != "" {
		t.Fatalf("before any ask: %q %v", k, err)
	}
	keys := make([]string, 16)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := s.EnsureSigningKey(ctx, "sb-1", fmt.Sprintf("key-%02d", i))
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for _, k := range keys {
		if k != keys[0] || k == "" {
			t.Fatalf("racing first asks got %q", keys)
		}
	}
	if err := s.SetSigningKey(ctx, "sb-1", "rotated", t0); err != nil {
		t.Fatal(err)
	}
	if k, err := s.EnsureSigningKey(ctx, "sb-1", "ignored"); err != nil || k != "rotated" {
		t.Fatalf("after the rotation: %q %v", k, err)
	}
	for _, fn := range []func() error{
		func() error { _, err := s.SigningKey(ctx, "nope"); return err },
		func() error { _, err := s.EnsureSigningKey(ctx, "nope", "k"); return err },
		func() error { return s.SetSigningKey(ctx, "nope", "k", t0) },
	} {
		if err := fn(); !errors.Is(err, sandpit.ErrNotFound) {
			t.Errorf("unknown sandbox: %v, want ErrNotFound", err)
		}
	}
}
