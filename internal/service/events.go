package service

import (
	"context"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// CanSeeEvent reports whether the caller in ctx may see the event: its
// sandbox's, or its template's, owner (or an admin).
func CanSeeEvent(ctx context.Context, e events.Event) bool {
	if e.IsBuild() {
		p := identity.Of(ctx)
		return p.Admin || p.Owner == e.Template.Owner
	}
	return identity.CanSee(ctx, e.Sandbox)
}

// Events is the bus the service publishes its state changes on.
func (s *Service) Events() *events.Bus { return s.bus }

// publish announces one state change of sb.
func (s *Service) publish(typ events.Type, sb sandpit.Sandbox, old sandpit.State) {
	if typ == events.Deleted || typ == events.Expired {
		// What the egress proxy recorded of the sandbox goes with it.
		if s.cfg.Egress != nil {
			s.cfg.Egress.Forget(sb.ID)
		}
		s.cfg.Metrics.EgressForget(sb.ID)
	}
	s.bus.Publish(events.Event{Type: typ, Sandbox: sb, OldState: old, Time: s.now(), Node: s.cfg.NodeName})
}
