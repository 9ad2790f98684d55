package templates

import (
	"context"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/events"
)

// buildChange is one change of a build's state: its start (to
// BuildBuilding) or its end (to BuildReady or BuildError).
type buildChange struct {
	t  sandpit.Template
	b  sandpit.TemplateBuild
	to sandpit.BuildState
	// image and reason are an end's: the image a ready build made, why a
	// failed one failed.
	image, reason string
	// joined is a start of a build that joined a run of the same content:
	// its row stays waiting (the running build holds the template's one
	// running slot) and only the event tells of it.
	joined bool
	// quiet is an end nobody was told had started (a start the quota
	// refused, a build the previous process left): no event.
	quiet bool
}

// transition is the one place a build's state changes: it writes the
// change to the store and publishes its event (events.BuildStarted,
// BuildReady, BuildError), so that no subscriber hears of a state the store
// does not hold and no state change goes unannounced.
func (s *Service) transition(ctx context.Context, c buildChange) error {
	if c.to == sandpit.BuildBuilding {
		if !c.joined {
			if err := s.store.StartBuild(ctx, c.b, s.now()); err != nil {
				return err
			}
		}
		c.b.State = sandpit.BuildBuilding
		s.publish(events.BuildStarted, c.t, c.b)
		return nil
	}
	if err := s.store.FinishBuild(ctx, c.b.ID, c.to, c.image, c.reason, s.now()); err != nil {
		return err
	}
	if c.quiet {
		return nil
	}
	// The event carries the build and its template as the end left them
	// (a ready build set the template's image).
	b, err := s.store.GetBuild(ctx, c.b.ID)
	if err != nil {
		return nil
	}
	t, err := s.store.GetTemplate(ctx, c.t.ID)
	if err != nil {
		return nil
	}
	typ := events.BuildReady
	if c.to == sandpit.BuildError {
		typ = events.BuildError
	}
	s.publish(typ, t, b)
	return nil
}

func (s *Service) publish(typ events.Type, t sandpit.Template, b sandpit.TemplateBuild) {
	s.bus.Publish(events.Event{Type: typ, Template: t, Build: b, Time: s.now(), Node: s.cfg.NodeName})
}
