package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// TestCreateSandboxCappedConcurrently races twenty creates for three slots:
// exactly three rows are inserted and every other create is refused with
// ErrQuotaExceeded, because the count and the insert are one statement on the
// single writer.
func TestCreateSandboxCappedConcurrently(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	var ok, refused atomic.Int32
	parallel(20, func(i int) {
		err := s.CreateSandboxWithinLimits(ctx, sandpit.Sandbox{ID: fmt.Sprintf("sb%02d", i), Image: "busybox", State: sandpit.StateCreating, CreatedAt: t0}, sandpit.OwnerLimits{}, 3)
		switch {
		case err == nil:
			ok.Add(1)
		case errors.Is(err, sandpit.ErrQuotaExceeded):
			refused.Add(1)
		default:
			t.Errorf("create %d: %v", i, err)
		}
	})
	if ok.Load() != 3 || refused.Load() != 17 {
		t.Fatalf("created %d, refused %d; want 3 and 17", ok.Load(), refused.Load())
	}
	all, _, err := s.ListSandboxes(ctx, sandpit.ListOptions{})
	if err != nil || len(all) != 3 {
		t.Fatalf("rows = %d (%v), want 3", len(all), err)
	}
}

// TestPortAccessRoundTrip: the port-access policy and traffic token are
// stored, and a row made without one reads back as "exposed".
func TestPortAccessRoundTrip(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for _, tc := range []struct {
		id     string
		access sandpit.PortAccess
		want   sandpit.PortAccess
		token  string
	}{
		{"sba", "", sandpit.PortAccessExposed, ""},
		{"sbb", sandpit.PortAccessPublic, sandpit.PortAccessPublic, ""},
		{"sbc", sandpit.PortAccessToken, sandpit.PortAccessToken, "tok"},
	} {
		if err := s.CreateSandbox(ctx, sandpit.Sandbox{ID: tc.id, Image: "busybox", State: sandpit.StateRunning, PortAccess: tc.access, TrafficToken: tc.token}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetSandbox(ctx, tc.id)
		if err != nil || got.PortAccess != tc.want || got.TrafficToken != tc.token {
			t.Fatalf("%s: got %q %q (%v), want %q %q", tc.id, got.PortAccess, got.TrafficToken, err, tc.want, tc.token)
		}
	}
	if err := s.CreateSandbox(ctx, sandpit.Sandbox{ID: "sbd", Image: "busybox", State: sandpit.StateRunning, PortAccess: "bogus"}); err == nil {
		t.Fatal("the schema accepted an unknown port access policy")
	}
}
