// Package events is the daemon's fan-out of state changes: sandboxes'
// (created, paused, died, ...), template builds' and the egress proxy's
// denials. The domain packages publish on one Bus; the API's event streams
// and the Daytona socket subscribe to it. It is a leaf, so every aggregate
// can publish without importing another.
package events

import (
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/egress"
)

// Type names a state change.
type Type string

// The sandbox state changes.
const (
	Created Type = "created"
	Started Type = "started"
	Stopped Type = "stopped"
	Paused  Type = "paused"
	Resumed Type = "resumed"
	// Archived: a stopped sandbox's filesystem went into its archive image
	// and its container was removed.
	Archived Type = "archived"
	// Expired: the sweeper deleted a sandbox whose end time passed.
	Expired Type = "expired"
	Deleted Type = "deleted"
	// Died: the sandbox's container stopped or vanished on its own.
	Died Type = "died"
	// Dropped: in a cluster, this node removed its copy of a sandbox the
	// cluster places on another node (or gave up re-creating it here); the
	// sandbox itself may live on elsewhere, so this is not a delete.
	Dropped Type = "dropped"
	// NetworkDenied: the egress proxy refused one of the sandbox's
	// connections or DNS answers (Denial says which). The sandbox's state
	// did not change.
	NetworkDenied Type = "network.denied"
)

// The template build changes. They are not sandbox changes: such an event
// carries Template and Build and a zero Sandbox, and relays of sandbox state
// (the Daytona socket) skip them by IsBuild.
const (
	BuildStarted Type = "template.building"
	BuildReady   Type = "template.ready"
	BuildError   Type = "template.error"
)

// Event is one state change. Sandbox is the sandbox after the change (for
// deleted and expired, as it was just before its row went); OldState is its
// state before.
type Event struct {
	Type     Type
	Sandbox  sandpit.Sandbox
	OldState sandpit.State
	Time     time.Time
	// Node is the cluster node whose daemon published the change: the
	// sandbox's owner; "" on a single daemon.
	Node string
	// Template and Build are set on a build event (IsBuild): the template
	// and its build after the change.
	Template sandpit.Template
	Build    sandpit.TemplateBuild
	// Denial is set on NetworkDenied.
	Denial *egress.Denial
}

// Gone reports whether the change removed the sandbox.
func (e Event) Gone() bool { return e.Type == Deleted || e.Type == Expired }

// IsBuild reports whether the event is a template build's change rather
// than a sandbox's.
func (e Event) IsBuild() bool { return e.Build.ID != "" }

// Subscription receives every event published after it was made, in order.
// A subscriber that falls more than its buffer behind is dropped: its channel
// is closed, so that one slow reader never holds up an operation.
type Subscription struct {
	c   chan Event
	bus *Bus
}

// C is the subscription's channel; it is closed when the subscription ends.
func (s *Subscription) C() <-chan Event { return s.c }

// Close ends the subscription.
func (s *Subscription) Close() { s.bus.drop(s) }

// Bus delivers each published event to every subscription.
type Bus struct {
	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool
}

// NewBus returns a bus with no subscriptions.
func NewBus() *Bus { return &Bus{subs: map[*Subscription]struct{}{}} }

func (b *Bus) drop(s *Subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked(s)
}

func (b *Bus) dropLocked(s *Subscription) {
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		close(s.c)
	}
}

// Publish delivers e to every subscription that has room for it, and drops
// those that do not.
func (b *Bus) Publish(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.c <- e:
		default:
			b.dropLocked(s)
		}
	}
}

// Subscribe returns a subscription to every event published from now on,
// with room for buffer undelivered events (at least 1).
func (b *Bus) Subscribe(buffer int) *Subscription {
	sub := &Subscription{c: make(chan Event, max(buffer, 1)), bus: b}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(sub.c)
		return sub
	}
	b.subs[sub] = struct{}{}
	return sub
}

// Close ends every subscription, and refuses new ones: the daemon calls it
// when it shuts down, so that long-lived event streams end and let the HTTP
// server finish.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for sub := range b.subs {
		b.dropLocked(sub)
	}
}
