package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/events"
)

// change is one sandbox state change: from what the caller read (from), to
// state with reason, announced as typ. An empty state removes the row.
type change struct {
	typ    events.Type
	from   sandpit.Sandbox
	state  sandpit.State
	reason string
	// mode is the pause mode of a change to paused (PauseNone reads as a
	// memory pause); every other state clears the mode.
	mode sandpit.PauseMode
	// reread makes the event carry the row as the store has it after the
	// write (stopped_at, activity, ...) rather than from with its state
	// replaced; the changes that announced a fresh read before keep doing so.
	reread bool
	// then, when set, runs after the write and before the event (a
	// delete frees the sandbox's name in the cluster before announcing).
	then func()
}

// errReread: the change was written, but the row could not be read again
// for its event, which was therefore not published.
var errReread = errors.New("read sandbox after its state change")

// errUnannounced is a change without an event other than a rollback.
var errUnannounced = errors.New("a sandbox state change without an event")

// transition is the one place a sandbox's state changes: it writes the row
// and publishes the change's event, so that no path can change a state
// without its subscribers hearing of it. Two writes announce nothing by
// design: the rollback of a row still creating (an empty typ; its create
// never announced it, so nobody heard of the sandbox) and markDeleting,
// whose change is announced by the removal that ends it. The returned
// sandbox is the one the event carried.
func (s *Service) transition(ctx context.Context, c change) (sandpit.Sandbox, error) {
	if c.typ == "" && (c.state != "" || c.from.State != sandpit.StateCreating) {
		return c.from, fmt.Errorf("%w: sandbox %s from %s to %q", errUnannounced, c.from.ID, c.from.State, c.state)
	}
	if c.state == "" {
		if err := s.store.DeleteSandbox(ctx, c.from.ID); err != nil {
			return c.from, err
		}
		if c.then != nil {
			c.then()
		}
		if c.typ != "" {
			s.publish(c.typ, c.from, c.from.State)
		}
		return c.from, nil
	}
	mode := sandpit.PauseNone
	if c.state == sandpit.StatePaused {
		mode = c.mode
		if mode == sandpit.PauseNone {
			mode = sandpit.PauseMemory
		}
	}
	if err := s.store.SetSandboxStateMode(ctx, c.from.ID, c.state, mode, c.reason, s.now()); err != nil {
		return c.from, err
	}
	if c.then != nil {
		c.then()
	}
	after := c.from
	after.State, after.StateReason, after.PauseMode = c.state, c.reason, mode
	if c.reread {
		var err error
		if after, err = s.store.GetSandbox(ctx, c.from.ID); err != nil {
			return after, fmt.Errorf("%w: %w", errReread, err)
		}
	}
	s.publish(c.typ, after, c.from.State)
	return after, nil
}

// markDeleting records that sb's delete has begun, so that a daemon that
// dies midway finishes it on its next start. It publishes nothing: the
// delete's removal of the row (through transition) announces the change.
func (s *Service) markDeleting(ctx context.Context, sb sandpit.Sandbox) error {
	if sb.State == sandpit.StateDeleting {
		return nil
	}
	return s.store.SetSandboxState(ctx, sb.ID, sandpit.StateDeleting, "", s.now())
}

// removeRow removes sb's row through transition, announcing typ (empty
// for the rollback of a create).
func (s *Service) removeRow(ctx context.Context, typ events.Type, sb sandpit.Sandbox) error {
	_, err := s.transition(ctx, change{typ: typ, from: sb})
	return err
}
