package service

import (
	"context"
	"errors"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/events"
)

// WatchEngine follows the engine's event stream until ctx ends, so that a
// container that dies on its own (OOM, `docker kill`, an engine restart) is
// noticed at once: its routes go and its sandbox becomes stopped with the
// reason. Each time the stream (re)connects, the running sandboxes are
// checked against the engine, because events sent while nobody listened are
// lost.
func (s *Service) WatchEngine(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		evs, errs := s.rt.Events(sctx, s.ownLabels())
		// The check runs beside the stream: it may wait on sandboxes busy
		// with long operations, and events must keep flowing meanwhile.
		// It catches deaths the stream missed while it was down. After a
		// restart it waits for the reconcile's checks, which compare every
		// sandbox with one engine listing: run at once, it checked each
		// unchecked sandbox with an inspect of its own instead, one at a
		// time, at every start.
		s.background(func() {
			if s.WaitChecked(ctx) == nil {
				s.checkRunning(ctx)
			}
		})
		connected := time.Now()
	loop:
		for {
			select {
			case ev, ok := <-evs:
				if !ok {
					break loop
				}
				s.onEngineEvent(ctx, ev)
			case err := <-errs:
				if ctx.Err() == nil {
					s.log.Warn("engine event stream ended; reconnecting", "err", err)
				}
				break loop
			case <-ctx.Done():
				break loop
			}
		}
		cancel()
		if time.Since(connected) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// onEngineEvent handles one event about a managed container.
func (s *Service) onEngineEvent(ctx context.Context, ev driver.Event) {
	if ev.SandboxID == "" {
		return
	}
	s.log.Debug("engine event", "kind", ev.Kind, "sandbox", ev.SandboxID, "exit_code", ev.ExitCode)
	// The check waits for the sandbox's lock, which a long operation (a
	// create awaiting its agent) may hold; the stream must not wait with it.
	s.background(func() {
		// A pooled container is labelled with its slot: a free one is the
		// pool's to replace, an adopted one's death is its sandbox's.
		id := s.pool.poolEvent(ctx, ev.SandboxID)
		if id == "" {
			return
		}
		if err := s.checkContainer(ctx, id); err != nil && !errors.Is(err, sandpit.ErrNotFound) && ctx.Err() == nil {
			s.log.Error("engine event", "sandbox", id, "kind", ev.Kind, "err", err)
		}
	})
}

// checkRunning checks every running, paused or stopped sandbox against the
// engine.
func (s *Service) checkRunning(ctx context.Context) {
	rows, err := s.allSandboxes(ctx, []sandpit.State{sandpit.StateRunning, sandpit.StatePaused, sandpit.StateStopped})
	if err != nil {
		s.log.Error("check running sandboxes", "err", err)
		return
	}
	for _, sb := range rows {
		if err := s.checkContainer(ctx, sb.ID); err != nil && !errors.Is(err, sandpit.ErrNotFound) && ctx.Err() == nil {
			s.log.Error("check running sandbox", "sandbox", sb.ID, "err", err)
		}
	}
}

// checkContainer compares one sandbox's row with its container, under the
// sandbox's lock, and records a death the daemon did not cause. The event
// that led here may be stale (a die from before the last start, or one the
// daemon's own stop caused), so the container's current state decides, not
// the event.
func (s *Service) checkContainer(ctx context.Context, id string) error {
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	switch sb.State {
	case sandpit.StateRunning, sandpit.StatePaused, sandpit.StateStopped:
	default:
		return nil
	}
	s.mu.Lock()
	starting := s.starting[id]
	s.mu.Unlock()
	if starting {
		return nil // reconcile is bringing it back
	}
	c, err := s.rt.Inspect(ctx, sb.ContainerID)
	switch {
	case errors.Is(err, driver.ErrNotFound) && archived(sb):
		return nil // an archive has no container: its image holds its files
	case errors.Is(err, driver.ErrNotFound):
		return s.sandboxDied(ctx, id, sandpit.ReasonRemoved)
	case err != nil:
		return runtimeErr("inspect", err)
	case sb.State == sandpit.StateStopped:
		return nil // its container is there: it can start again
	case sb.State == sandpit.StatePaused && sb.PauseMode == sandpit.PauseFilesystem:
		return nil // its container is stopped on purpose
	case c.State == "running" || c.State == "paused" || c.State == "restarting":
		return nil
	case s.ckpt.has(id):
		// The container exited because its processes were written to
		// disk: a checkpointed memory pause (recorded, or about to be).
		if sb.State == sandpit.StatePaused {
			return nil
		}
		_, err := s.transition(ctx, change{typ: events.Paused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseMemory, reread: true})
		return err
	case sb.State == sandpit.StatePaused:
		// A memory pause whose frozen processes went (the engine
		// restarted under a running daemon): the files are left, and the
		// sandbox stays paused as a filesystem pause that says so.
		s.log.Warn("memory pause lost with the engine; kept as a filesystem pause", "sandbox", id)
		_, err := s.transition(ctx, change{typ: events.Paused, from: sb, state: sandpit.StatePaused,
			mode: sandpit.PauseFilesystem, reason: sandpit.ReasonMemoryLost, reread: true})
		return err
	}
	return s.sandboxDied(ctx, id, deathReason(c))
}

// deathReason names why a container that is not running stopped.
func deathReason(c driver.Container) string {
	switch {
	case c.OOMKilled:
		return sandpit.ReasonOOM
	case c.ExitCode > 128:
		// 128+n: the main process was ended by signal n from outside.
		return sandpit.ReasonKilled
	}
	return sandpit.ReasonExited
}

// sandboxDied records that a sandbox's container stopped (or vanished)
// without the daemon asking: its routes go first, since the address they
// point at may be handed to another container. A stopped container can be
// started again, so the sandbox is stopped; one that was removed cannot, so
// the sandbox is in error. The caller holds the sandbox's lock. This is the
// one place a death is recorded, for anything that wants to hear of it.
func (s *Service) sandboxDied(ctx context.Context, id, reason string) error {
	state := sandpit.StateStopped
	if reason == sandpit.ReasonRemoved {
		state = sandpit.StateError
	}
	s.log.Warn("sandbox container died", "sandbox", id, "state", state, "reason", reason)
	s.removeRoutes(ctx, id)
	s.forgetIP(id)
	// The rules name the dead container's address, which the engine may
	// hand to the next container.
	s.removeFirewall(ctx, id)
	old, _ := s.store.GetSandbox(ctx, id)
	old.ID = id
	_, err := s.transition(ctx, change{typ: events.Died, from: old, state: state, reason: reason, reread: true})
	return err
}
