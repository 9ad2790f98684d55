package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// TestPrivatePorts: a port is marked private only while exposed, the first
// mark's token stands, and the mark goes with the exposure.
func TestPrivatePorts(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	createSandbox(t, s, "sb-a", "")
	if _, err := s.MarkPortPrivate(ctx, "sb-a", 8080, "tok-1", t0); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("mark an unexposed port: %v, want ErrNotFound", err)
	}
	if _, err := s.TryReserveHostPort(ctx, sandpit.ExposedPort{SandboxID: "sb-a", Port: 8080, Protocol: "http", CreatedAt: t0}, t0); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"tok-1", "tok-2"} {
		got, err := s.MarkPortPrivate(ctx, "sb-a", 8080, tok, t0)
		if err != nil || got != "tok-1" {
			t.Fatalf("mark with %s: %q %v, want the first token", tok, got, err)
		}
	}
	if tok, ok, err := s.PrivatePortToken(ctx, "sb-a", 8080); err != nil || !ok || tok != "tok-1" {
		t.Fatalf("PrivatePortToken: %q %v %v", tok, ok, err)
	}
	if m, err := s.ListPrivatePorts(ctx, "sb-a"); err != nil || len(m) != 1 || m[8080] != "tok-1" {
		t.Fatalf("ListPrivatePorts: %v %v", m, err)
	}
	if err := s.DeletePort(ctx, "sb-a", 8080); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.PrivatePortToken(ctx, "sb-a", 8080); err != nil || ok {
		t.Fatalf("after unexposing: private=%v %v, want public", ok, err)
	}
}
