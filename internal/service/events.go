package service

import (
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// EventType names a sandbox state change.
type EventType string

// The state changes the service announces.
const (
	EventCreated EventType = "created"
	EventStarted EventType = "started"
	EventStopped EventType = "stopped"
	EventPaused  EventType = "paused"
	EventResumed EventType = "resumed"
	// EventExpired: the sweeper deleted a sandbox whose end time passed.
	EventExpired EventType = "expired"
	EventDeleted EventType = "deleted"
	// EventDied: the sandbox's container stopped or vanished on its own.
	EventDied EventType = "died"
	// EventDropped: in a cluster, this node removed its copy of a sandbox
	// the cluster places on another node (or gave up re-creating it here);
	// the sandbox itself may live on elsewhere, so this is not a delete.
	EventDropped EventType = "dropped"
)

// Event is one sandbox state change. Sandbox is the sandbox after the change
// (for deleted and expired, as it was just before its row went); OldState is
// its state before.
type Event struct {
	Type     EventType
	Sandbox  sandpit.Sandbox
	OldState sandpit.State
	Time     time.Time
	// Node is the cluster node whose service published the change: the
	// sandbox's owner; "" on a single daemon.
	Node string
}

// Gone reports whether the change removed the sandbox.
func (e Event) Gone() bool { return e.Type == EventDeleted || e.Type == EventExpired }

// Subscription receives every event published after it was made, in order.
// A subscriber that falls more than its buffer behind is dropped: its channel
// is closed, so that one slow reader never holds up an operation.
type Subscription struct {
	c   chan Event
	bus *events
}

// C is the subscription's channel; it is closed when the subscription ends.
func (s *Subscription) C() <-chan Event { return s.c }

// Close ends the subscription.
func (s *Subscription) Close() { s.bus.drop(s) }

// events is the service's fan-out of state changes.
type events struct {
	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool
}

func newEvents() *events { return &events{subs: map[*Subscription]struct{}{}} }

func (b *events) drop(s *Subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked(s)
}

func (b *events) dropLocked(s *Subscription) {
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		close(s.c)
	}
}

func (b *events) publish(e Event) {
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

// Subscribe returns a subscription to every sandbox state change, with room
// for buffer undelivered events (at least 1).
func (s *Service) Subscribe(buffer int) *Subscription {
	sub := &Subscription{c: make(chan Event, max(buffer, 1)), bus: s.events}
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	if s.events.closed {
		close(sub.c)
		return sub
	}
	s.events.subs[sub] = struct{}{}
	return sub
}

// CloseEvents ends every subscription, and refuses new ones: the daemon calls
// it when it shuts down, so that long-lived event streams end and let the
// HTTP server finish.
func (s *Service) CloseEvents() {
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	s.events.closed = true
	for sub := range s.events.subs {
		s.events.dropLocked(sub)
	}
}

// publish announces one state change of sb.
func (s *Service) publish(typ EventType, sb sandpit.Sandbox, old sandpit.State) {
	s.events.publish(Event{Type: typ, Sandbox: sb, OldState: old, Time: s.now(), Node: s.cfg.NodeName})
}
