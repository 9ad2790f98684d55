package templates

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// buildQueue hands out the daemon's build slots fairly across owners. A
// plain semaphore serves waiters in arrival order, so one owner who queues
// many long builds holds every slot while the others wait behind all of
// them. Here a freed slot goes to the waiting owner that runs the fewest
// builds, and among those the one served longest ago (round robin; the
// earliest waiter of that owner first): another owner's build starts at the
// next slot's turn, whatever one owner has queued.
type buildQueue struct {
	mu      sync.Mutex
	slots   int
	running map[string]int    // owner -> builds holding a slot
	served  map[string]uint64 // owner -> turn it last got a slot
	turn    uint64
	waiting []*buildWaiter // in arrival order
}

type buildWaiter struct {
	owner string
	build string
	ready chan struct{} // closed when the waiter holds a slot
}

func newBuildQueue(slots int) *buildQueue {
	return &buildQueue{slots: max(slots, 1), running: map[string]int{}, served: map[string]uint64{}}
}

// acquire waits for a slot for one of owner's builds; release gives it
// back. waited reports whether the build had to queue.
func (q *buildQueue) acquire(ctx context.Context, owner, build string, onQueued func()) (release func(), err error) {
	q.mu.Lock()
	w := &buildWaiter{owner: owner, build: build, ready: make(chan struct{})}
	q.waiting = append(q.waiting, w)
	q.dispatchLocked()
	q.mu.Unlock()
	select {
	case <-w.ready:
	default:
		if onQueued != nil {
			onQueued()
		}
		select {
		case <-w.ready:
		case <-ctx.Done():
			q.mu.Lock()
			defer q.mu.Unlock()
			select {
			case <-w.ready:
				// The slot came with the cancellation: hand it on.
				q.running[owner]--
				q.dispatchLocked()
			default:
				q.waiting = slices.DeleteFunc(q.waiting, func(x *buildWaiter) bool { return x == w })
			}
			return nil, ctx.Err()
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.running[owner]--; q.running[owner] <= 0 {
				delete(q.running, owner)
			}
			q.dispatchLocked()
		})
	}, nil
}

// dispatchLocked gives free slots to waiters in fair order.
func (q *buildQueue) dispatchLocked() {
	for q.inUseLocked() < q.slots && len(q.waiting) > 0 {
		i := q.nextLocked(q.running, q.served)
		w := q.waiting[i]
		q.waiting = slices.Delete(q.waiting, i, i+1)
		q.running[w.owner]++
		q.turn++
		q.served[w.owner] = q.turn
		close(w.ready)
	}
}

func (q *buildQueue) inUseLocked() int {
	n := 0
	for _, c := range q.running {
		n += c
	}
	return n
}

// nextLocked is the index of the waiter served next given the running
// counts and the turns each owner was last served: the owner running
// fewest, then the one served longest ago, then the earliest waiter.
func (q *buildQueue) nextLocked(running map[string]int, served map[string]uint64) int {
	best := 0
	for i, w := range q.waiting {
		b := q.waiting[best]
		if running[w.owner] < running[b.owner] || (running[w.owner] == running[b.owner] && served[w.owner] < served[b.owner]) {
			best = i
		}
	}
	return best
}

// position is the build's place in the queue (1 = served next), or 0 when
// it is not waiting: the order the queue would serve the waiters in if
// no one else arrived and each served build held its slot.
func (q *buildQueue) position(build string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	running := maps.Clone(q.running)
	served := maps.Clone(q.served)
	turn := q.turn
	waiting := q.waiting
	defer func() { q.waiting = waiting }()
	q.waiting = slices.Clone(waiting)
	for pos := 1; len(q.waiting) > 0; pos++ {
		i := q.nextLocked(running, served)
		w := q.waiting[i]
		if w.build == build {
			return pos
		}
		running[w.owner]++
		turn++
		served[w.owner] = turn
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
	return 0
}

// queued is how many builds wait for a slot.
func (q *buildQueue) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}
