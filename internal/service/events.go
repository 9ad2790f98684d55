package service

import (
	"context"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/egress"
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
	// EventArchived: a stopped sandbox's filesystem went into its archive
	// image and its container was removed.
	EventArchived EventType = "archived"
	// EventExpired: the sweeper deleted a sandbox whose end time passed.
	EventExpired EventType = "expired"
	EventDeleted EventType = "deleted"
	// EventDied: the sandbox's container stopped or vanished on its own.
	EventDied EventType = "died"
	// EventDropped: in a cluster, this node removed its copy of a sandbox
	// the cluster places on another node (or gave up re-creating it here);
	// the sandbox itself may live on elsewhere, so this is not a delete.
	EventDropped EventType = "dropped"
	// EventNetworkDenied: the egress proxy refused one of the sandbox's
	// connections or DNS answers (Denial says which). The sandbox's state
	// did not change.
	EventNetworkDenied EventType = "network.denied"
)

// The template build changes the service announces. They are not sandbox
// changes: such an event carries Template and Build and a zero Sandbox, and
// relays of sandbox state (the Daytona socket) skip them by IsBuild.
const (
	EventBuildStarted EventType = "template.building"
	EventBuildReady   EventType = "template.ready"
	EventBuildError   EventType = "template.error"
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
	// Template and Build are set on a build event (IsBuild): the template
	// and its build after the change.
	Template sandpit.Template
	Build    sandpit.TemplateBuild
	// Denial is set on EventNetworkDenied.
	Denial *egress.Denial
}

// Gone reports whether the change removed the sandbox.
func (e Event) Gone() bool { return e.Type == EventDeleted || e.Type == EventExpired }

// IsBuild reports whether the event is a template build's change rather
// than a sandbox's.
func (e Event) IsBuild() bool { return e.Build.ID != "" }

// CanSeeEvent reports whether the caller in ctx may see the event: its
// sandbox's, or its template's, owner (or an admin).
func CanSeeEvent(ctx context.Context, e Event) bool {
	if e.IsBuild() {
		p := principalOf(ctx)
		return p.Admin || p.Owner == e.Template.Owner
	}
	return CanSee(ctx, e.Sandbox)
}

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
	if typ == EventDeleted || typ == EventExpired {
		// What the egress proxy recorded of the sandbox goes with it.
		if s.cfg.Egress != nil {
			s.cfg.Egress.Forget(sb.ID)
		}
		s.cfg.Metrics.EgressForget(sb.ID)
	}
	s.events.publish(Event{Type: typ, Sandbox: sb, OldState: old, Time: s.now(), Node: s.cfg.NodeName})
}

// publishBuild announces a change of a template build.
func (s *Service) publishBuild(typ EventType, t sandpit.Template, b sandpit.TemplateBuild) {
	s.events.publish(Event{Type: typ, Template: t, Build: b, Time: s.now(), Node: s.cfg.NodeName})
}
