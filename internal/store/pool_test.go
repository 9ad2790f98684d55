package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

func addSlots(t *testing.T, s *store.Store, key string, n int, ready bool) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("pool-%s-%d", key, i)
		if err := s.AddPoolSlot(ctx, store.PoolSlot{ID: id, Key: key, Image: key, ContainerID: "c-" + id, Token: "tok", CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if ready {
			if err := s.MarkPoolSlotReady(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestAdoptPoolSlotConcurrently: 100 sandboxes race for 10 slots; exactly 10
// win, each a different slot, and each winner's row points at its slot's
// container.
func TestAdoptPoolSlotConcurrently(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	addSlots(t, s, "img", 10, true)
	addSlots(t, s, "other", 2, true)
	for i := range 100 {
		createSandbox(t, s, fmt.Sprintf("sb-%d", i), "")
	}
	var (
		mu    sync.Mutex
		won   = map[string]string{}
		empty int
	)
	parallel(100, func(i int) {
		id := fmt.Sprintf("sb-%d", i)
		p, err := s.AdoptPoolSlot(ctx, "img", id, t0)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, sandpit.ErrNotFound):
			empty++
		case err != nil:
			t.Errorf("adopt for %s: %v", id, err)
		default:
			if prev, dup := won[p.ID]; dup {
				t.Errorf("slot %s adopted by %s and %s", p.ID, prev, id)
			}
			won[p.ID] = id
		}
	})
	if len(won) != 10 || empty != 90 {
		t.Fatalf("%d adopted, %d found none; want 10 and 90", len(won), empty)
	}
	for slot, sbID := range won {
		sb, err := s.GetSandbox(ctx, sbID)
		if err != nil || sb.ContainerID != "c-"+slot {
			t.Fatalf("sandbox %s container %q, want c-%s (%v)", sbID, sb.ContainerID, slot, err)
		}
	}
	free, err := s.ListFreePoolSlots(ctx)
	if err != nil || len(free) != 2 {
		t.Fatalf("free slots after the race: %d (%v), want the 2 of another key", len(free), err)
	}
}

// TestAdoptPoolSlotRetryKeepsItsSlot: a retried adoption returns the slot the
// sandbox holds instead of taking a second; deleting the sandbox deletes it.
func TestAdoptPoolSlotRetryKeepsItsSlot(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	addSlots(t, s, "img", 3, true)
	addSlots(t, s, "unready", 1, false)
	createSandbox(t, s, "sb-a", "")
	first, err := s.AdoptPoolSlot(ctx, "img", "sb-a", t0)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.AdoptPoolSlot(ctx, "img", "sb-a", t0)
	if err != nil || again.ID != first.ID {
		t.Fatalf("retry adopted %q (%v), want %q", again.ID, err, first.ID)
	}
	if _, err := s.AdoptPoolSlot(ctx, "unready", "sb-a", t0); err != nil {
		t.Fatalf("adopting under another key with a slot held: %v", err)
	}
	createSandbox(t, s, "sb-b", "")
	if _, err := s.AdoptPoolSlot(ctx, "unready", "sb-b", t0); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("adopting a slot that is not ready: %v, want ErrNotFound", err)
	}
	if _, err := s.AdoptPoolSlot(ctx, "img", "sb-missing", t0); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("adopting for an unknown sandbox: %v, want ErrNotFound", err)
	}
	// A free-slot delete leaves an adopted slot alone.
	if err := s.DeletePoolSlot(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetPoolSlotOf(ctx, "sb-a"); err != nil || got.ID != first.ID {
		t.Fatalf("adopted slot after DeletePoolSlot: %+v %v", got, err)
	}
	if err := s.DeleteSandbox(ctx, "sb-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPoolSlot(ctx, first.ID); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("slot of a deleted sandbox: %v, want ErrNotFound", err)
	}
}

// TestPoolSlotsSchema: the claim is held by the schema, a partial unique
// index on the adopting sandbox, and a slot goes with its sandbox.
func TestPoolSlotsSchema(t *testing.T) {
	_, dir := openStore(t)
	db := rawDB(t, dir, true)
	var ddl string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'idx_pool_slots_sandbox'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"UNIQUE", "pool_slots(sandbox_id)", "WHERE sandbox_id IS NOT NULL"} {
		if !strings.Contains(ddl, p) {
			t.Errorf("index = %q, missing %q", ddl, p)
		}
	}
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'pool_slots'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ddl, "REFERENCES sandboxes(id) ON DELETE CASCADE") {
		t.Errorf("pool_slots does not cascade with its sandbox:\n%s", ddl)
	}
}
