package templates

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestBuildQueueFair: with one owner's builds queued first, another
// owner's build is served at the next slot's turn, and positions say so.
func TestBuildQueueFair(t *testing.T) {
	for _, slots := range []int{1, 2} {
		q := newBuildQueue(slots)
		ctx := context.Background()
		var mu sync.Mutex
		var order []string
		releases := map[string]func(){}
		acquire := func(owner, build string) chan struct{} {
			got := make(chan struct{})
			go func() {
				rel, err := q.acquire(ctx, owner, build, nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, build)
				releases[build] = rel
				mu.Unlock()
				close(got)
			}()
			return got
		}
		// Alice fills every slot, then queues three more; Bob comes last.
		for i := range slots {
			<-acquire("alice", "a-run"+string(rune('0'+i)))
		}
		var waits []chan struct{}
		for _, b := range []string{"a1", "a2", "a3"} {
			waits = append(waits, acquire("alice", b))
			for q.position(b) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		bob := acquire("bob", "b1")
		for q.position("b1") == 0 {
			time.Sleep(time.Millisecond)
		}
		if p := q.position("b1"); p != 1 {
			t.Fatalf("%d slots: bob's build is at position %d, want 1 (alice's: %d %d %d)", slots, p, q.position("a1"), q.position("a2"), q.position("a3"))
		}
		// One slot frees: Bob's build takes it.
		mu.Lock()
		rel := releases["a-run0"]
		mu.Unlock()
		rel()
		<-bob
		mu.Lock()
		got := slices.Clone(order)
		for _, r := range releases {
			r()
		}
		mu.Unlock()
		for _, w := range waits {
			<-w
			mu.Lock()
			for _, r := range releases {
				r()
			}
			mu.Unlock()
		}
		if got[slots] != "b1" {
			t.Fatalf("%d slots: served %v; bob's build should follow the running ones", slots, got)
		}
		if q.queued() != 0 {
			t.Fatalf("%d slots: %d still queued", slots, q.queued())
		}
	}
}

// TestBuildQueueCancel: a waiter whose context ends leaves the queue and
// takes no slot.
func TestBuildQueueCancel(t *testing.T) {
	q := newBuildQueue(1)
	rel, err := q.acquire(context.Background(), "a", "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := q.acquire(ctx, "b", "y", nil)
		done <- err
	}()
	for q.queued() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled waiter got a slot")
	}
	rel()
	rel2, err := q.acquire(context.Background(), "c", "z", nil)
	if err != nil {
		t.Fatal(err)
	}
	rel2()
}
