package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func TestSeedTapPool(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	if err := s.SeedTapPool(ctx, 3); err != nil {
		t.Fatal(err)
	}
	createSandbox(t, s, "sb-a", "")
	held, err := s.AllocateTapSlot(ctx, "sb-a", t0)
	if err != nil {
		t.Fatal(err)
	}
	if held != (sandpit.TapSlot{Slot: 0, TapName: "sp-tap0", VsockCID: 3, SandboxID: "sb-a"}) {
		t.Fatalf("first slot %+v", held)
	}
	// Reseeding (every start) keeps allocations and only adds slots.
	if err := s.SeedTapPool(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetTapSlot(ctx, "sb-a"); err != nil || got != held {
		t.Fatalf("after reseed: %+v %v", got, err)
	}
	for i := 1; i < 5; i++ {
		id := fmt.Sprintf("sb-%d", i)
		createSandbox(t, s, id, "")
		slot, err := s.AllocateTapSlot(ctx, id, t0)
		if err != nil {
			t.Fatal(err)
		}
		if slot.Slot != i || slot.TapName != fmt.Sprintf("sp-tap%d", i) || slot.VsockCID != int64(3+i) {
			t.Errorf("slot %d = %+v", i, slot)
		}
	}
	if err := s.SeedTapPool(ctx, -1); err == nil {
		t.Error("negative pool size accepted")
	}
}

func TestAllocateTapSlotConcurrentlyForOneSandbox(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	if err := s.SeedTapPool(ctx, 8); err != nil {
		t.Fatal(err)
	}
	createSandbox(t, s, "sb-a", "")
	slots := make([]sandpit.TapSlot, 32)
	errs := make([]error, 32)
	parallel(32, func(i int) { slots[i], errs[i] = s.AllocateTapSlot(ctx, "sb-a", t0) })
	for i := range 32 {
		if errs[i] != nil {
			t.Fatalf("allocation %d: %v", i, errs[i])
		}
		if slots[i] != slots[0] {
			t.Fatalf("allocation %d got %+v, allocation 0 got %+v", i, slots[i], slots[0])
		}
	}
	// The other seven slots are still free.
	for i := range 7 {
		id := fmt.Sprintf("sb-other-%d", i)
		createSandbox(t, s, id, "")
		if _, err := s.AllocateTapSlot(ctx, id, t0); err != nil {
			t.Fatalf("slot for %s: %v", id, err)
		}
	}
}

func TestAllocateTapSlotsAcrossSandboxes(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	const n = 8
	if err := s.SeedTapPool(ctx, n); err != nil {
		t.Fatal(err)
	}
	for i := range n + 1 {
		createSandbox(t, s, fmt.Sprintf("sb-%d", i), "")
	}
	slots := make([]sandpit.TapSlot, n)
	errs := make([]error, n)
	parallel(n, func(i int) { slots[i], errs[i] = s.AllocateTapSlot(ctx, fmt.Sprintf("sb-%d", i), t0) })
	seen := map[int]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if seen[slots[i].Slot] {
			t.Fatalf("slot %d handed out twice", slots[i].Slot)
		}
		seen[slots[i].Slot] = true
	}

	// Full pool: a newcomer is refused, but an owner's retry still works.
	if _, err := s.AllocateTapSlot(ctx, fmt.Sprintf("sb-%d", n), t0); !errors.Is(err, sandpit.ErrTapPoolExhausted) {
		t.Fatalf("full pool: got %v, want sandpit.ErrTapPoolExhausted", err)
	}
	if again, err := s.AllocateTapSlot(ctx, "sb-3", t0); err != nil || again != slots[3] {
		t.Fatalf("owner retry on a full pool: %+v %v, want %+v", again, err, slots[3])
	}

	// Release is idempotent and frees the slot for the newcomer.
	for range 2 {
		if err := s.ReleaseTapSlot(ctx, "sb-3"); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	if _, err := s.GetTapSlot(ctx, "sb-3"); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("GetTapSlot after release: %v", err)
	}
	// With a slot free, an unknown sandbox is caught by the foreign key.
	if _, err := s.AllocateTapSlot(ctx, "ghost", t0); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("unknown sandbox: got %v, want sandpit.ErrNotFound", err)
	}
	got, err := s.AllocateTapSlot(ctx, fmt.Sprintf("sb-%d", n), t0)
	if err != nil || got.Slot != slots[3].Slot {
		t.Fatalf("after release: %+v %v, want slot %d", got, err, slots[3].Slot)
	}

	// Deleting a sandbox frees its slot too.
	if err := s.DeleteSandbox(ctx, "sb-0"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseTapSlot(ctx, "sb-3"); err != nil {
		t.Fatal(err)
	}
	createSandbox(t, s, "sb-late", "")
	if got, err := s.AllocateTapSlot(ctx, "sb-late", t0); err != nil || got.Slot != slots[0].Slot {
		t.Fatalf("slot of a deleted sandbox: %+v %v, want slot %d", got, err, slots[0].Slot)
	}
}
