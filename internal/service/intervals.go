package service

import (
	"context"
	"errors"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/events"
)

// Lifecycle intervals: a sandbox idle for its auto-stop interval is stopped,
// one stopped for its auto-delete interval is deleted. Activity is recorded
// by Touch (toolbox calls, preview traffic, explicit refreshes) and the
// intervals live in the store, so both survive a daemon restart.

// SetInterval sets one lifecycle interval of a sandbox.
func (s *Service) SetInterval(ctx context.Context, id string, which sandpit.Interval, value int) (_ sandpit.Sandbox, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	if err := ValidateInterval(which, value); err != nil {
		return sandpit.Sandbox{}, err
	}
	if _, err := s.sandbox(ctx, id); err != nil {
		return sandpit.Sandbox{}, err
	}
	if err := s.store.SetSandboxInterval(ctx, id, which, value, s.now()); err != nil {
		return sandpit.Sandbox{}, err
	}
	return s.GetSandbox(ctx, id)
}

// touchEvery is how often one sandbox's activity is written at most: a
// twelfth of the interval unit (five seconds for minutes), which keeps the
// recorded idleness within a few percent of the truth at one write per
// burst of calls.
func (c Config) touchEvery() time.Duration { return c.IntervalUnit / 12 }

// Touch records activity on a sandbox: it resets its auto-stop countdown.
// Writes are throttled per sandbox; force writes regardless (an explicit
// refresh must be seen at once). Failures are logged, not returned: a
// toolbox call must not fail because its activity could not be recorded.
func (s *Service) Touch(ctx context.Context, id string, force bool) {
	now := s.now()
	s.mu.Lock()
	last, ok := s.touched[id]
	if ok && !force && now.Sub(last) < s.cfg.touchEvery() {
		s.mu.Unlock()
		return
	}
	s.touched[id] = now
	s.mu.Unlock()
	err := s.store.TouchSandbox(ctx, id, now)
	if errors.Is(err, sandpit.ErrNotFound) {
		// Not a sandbox (a preview host can name anything): remember
		// nothing about it, so made-up names cannot grow the map.
		s.forgetTouch(id)
		return
	}
	if err != nil {
		s.log.Warn("record sandbox activity", "sandbox", id, "err", err)
	}
}

// RefreshActivity is an explicit activity report (Daytona's
// refreshActivity): it always reaches the store.
func (s *Service) RefreshActivity(ctx context.Context, id string) error {
	if _, err := s.sandbox(ctx, id); err != nil {
		return err
	}
	s.Touch(ctx, id, true)
	return nil
}

// SweepLifecycle stops sandboxes idle past their auto-stop interval,
// archives those stopped past their auto-archive interval (their
// filesystem goes into an image, their container is removed) and deletes
// those stopped past their auto-delete interval. It returns how many
// it acted on. Both go through the same locked paths as a caller's stop and
// delete, so they take turns with other operations on the sandbox and are
// announced on the event stream.
func (s *Service) SweepLifecycle(ctx context.Context) (int, error) {
	due, err := s.store.ListLifecycleDue(ctx, s.now(), s.cfg.IntervalUnit)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sb := range due {
		switch sb.State {
		case sandpit.StateRunning:
			if _, err := s.StopSandbox(ctx, sb.ID); err != nil && !errors.Is(err, ErrDeletedOnStop) && !errors.Is(err, sandpit.ErrNotFound) {
				s.log.Error("sweep: auto-stop", "sandbox", sb.ID, "err", err)
				continue
			}
			s.log.Info("sandbox auto-stopped", "sandbox", sb.ID, "idle_since", sb.IdleSince())
		case sandpit.StateStopped:
			if !s.cfg.due(sb, sb.AutoDelete, sandpit.AutoDeleteNever) {
				// Due for its auto-archive only.
				if _, err := s.ArchiveSandbox(ctx, sb.ID); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
					s.log.Error("sweep: auto-archive", "sandbox", sb.ID, "err", err)
					continue
				}
				s.log.Info("sandbox auto-archived", "sandbox", sb.ID, "stopped_at", sb.StoppedAt)
				break
			}
			if err := s.deleteSandbox(ctx, sb.ID, events.Deleted); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
				s.log.Error("sweep: auto-delete", "sandbox", sb.ID, "err", err)
				continue
			}
			s.log.Info("sandbox auto-deleted", "sandbox", sb.ID, "stopped_at", sb.StoppedAt)
		default:
			continue
		}
		s.forgetTouch(sb.ID)
		n++
	}
	return n, nil
}

func (s *Service) forgetTouch(id string) {
	s.mu.Lock()
	delete(s.touched, id)
	s.mu.Unlock()
}

// due reports whether a stopped sandbox has been stopped for interval
// (in the interval unit); never is the interval's "never" value.
func (c Config) due(sb sandpit.Sandbox, interval, never int) bool {
	return interval != never && !sb.StoppedAt.IsZero() &&
		!c.Now().UTC().Before(sb.StoppedAt.Add(time.Duration(interval)*c.IntervalUnit))
}
