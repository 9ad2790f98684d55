package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
)

// defaultRestartParallel bounds how many sandboxes a start brings back at
// once: each restart waits for an agent, and a hundred at a time would only
// make every one of them slower.
const defaultRestartParallel = 8

// Reconcile makes the store and the engine agree after a restart. It decides
// what each sandbox needs from one engine listing and the store, does the
// quick fixes itself and returns; sandboxes whose containers must be started
// again come back in the background, RestartParallel at a time, and show as
// starting meanwhile, so the API serves at once. One sandbox's failure is
// logged and skipped: it never stops the others or the daemon.
//
//   - a row left in creating (its create died with the previous process) is
//     unwound; a row left in deleting is deleted;
//   - a managed container the store does not know is removed;
//   - a row whose container is gone is marked error;
//   - stopped row, running container: the container is stopped;
//   - running row, paused container: the row becomes paused;
//   - paused row, exited container: the row becomes stopped (exited);
//   - running row, exited container: the container is started again.
//
// Then every running sandbox's routes are installed again.
func (s *Service) Reconcile(ctx context.Context) error {
	containers, err := s.rt.List(ctx, s.ownLabels())
	if err != nil {
		return runtimeErr("list containers", err)
	}
	// Free pooled containers are kept or removed here; adopted ones come
	// back under their sandbox's id.
	if containers, err = s.reconcilePool(ctx, containers); err != nil {
		return err
	}
	byID := map[string]driver.Container{}
	for _, c := range containers {
		byID[c.SandboxID] = c
	}
	all, err := s.allSandboxes(ctx, nil)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	var restart []sandpit.Sandbox
	for _, sb := range all {
		known[sb.ID] = true
		c, exists := byID[sb.ID]
		again, err := s.reconcileOne(ctx, sb, c, exists)
		if err != nil {
			s.log.Error("reconcile: skipping sandbox", "sandbox", sb.ID, "err", err)
			continue
		}
		if again {
			restart = append(restart, sb)
		}
	}
	for id, c := range byID {
		if !known[id] {
			s.log.Warn("reconcile: removing orphan container", "container", c.ID, "sandbox", id)
			if err := s.rt.Remove(ctx, c.ID); err != nil {
				s.log.Error("reconcile: remove orphan container", "container", c.ID, "err", err)
			}
		}
	}
	s.mu.Lock()
	for _, sb := range restart {
		s.starting[sb.ID] = true
	}
	s.mu.Unlock()
	// Firewall rules are durable intent like routes: every sandbox whose
	// container runs (or is frozen) gets its rules asserted again, failing
	// closed, and the rules of every other sandbox go.
	confined := map[string]bool{}
	for _, sb := range all {
		c, ok := byID[sb.ID]
		if !ok || c.IP == "" || (c.State != "running" && c.State != "paused") {
			continue
		}
		if err := s.applyFirewall(ctx, sb, c.IP); err != nil {
			s.log.Error("reconcile: firewall; stopping the sandbox", "sandbox", sb.ID, "err", err)
			if _, err := s.StopSandbox(ctx, sb.ID); err != nil {
				s.log.Error("reconcile: stop unconfined sandbox", "sandbox", sb.ID, "err", err)
			}
			continue
		}
		confined[sb.ID] = true
		if sb.State == sandpit.StateRunning && c.State == "running" {
			if err := s.installRoutes(ctx, sb.ID, c.IP); err != nil {
				s.log.Error("reconcile: install routes", "sandbox", sb.ID, "err", err)
			}
		}
	}
	for _, sb := range restart {
		confined[sb.ID] = true // its start asserts the rules again
	}
	s.pruneFirewall(ctx, confined)
	s.background(func() { s.restartAll(ctx, restart) })
	return nil
}

// background runs fn on its own goroutine, tracked by Wait.
func (s *Service) background(fn func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
}

// Wait waits for the service's background work (reconcile's restarts, engine
// event handling) to end; the daemon calls it after cancelling their context
// and before it closes the store.
func (s *Service) Wait() { s.bg.Wait() }

// reconcileOne fixes one sandbox under its lock and reports whether its
// container needs starting again.
func (s *Service) reconcileOne(ctx context.Context, sb sandpit.Sandbox, c driver.Container, exists bool) (restart bool, err error) {
	unlock, err := s.locks.lock(ctx, sb.ID)
	if err != nil {
		return false, err
	}
	defer unlock()
	switch {
	case sb.State == sandpit.StateCreating:
		s.log.Warn("reconcile: unwinding interrupted create", "sandbox", sb.ID)
		return false, s.unwindLocked(ctx, sb)
	case sb.State == sandpit.StateDeleting:
		s.log.Warn("reconcile: finishing interrupted delete", "sandbox", sb.ID)
		return false, s.deleteLocked(ctx, sb.ID, EventDeleted)
	case !exists:
		if sb.State != sandpit.StateError {
			s.log.Warn("reconcile: container gone", "sandbox", sb.ID)
			return false, s.reconciled(ctx, EventDied, sb, sandpit.StateError, sandpit.ReasonRemoved)
		}
	case sb.State == sandpit.StateStopped && (c.State == "running" || c.State == "paused"):
		if c.State == "paused" {
			if err := s.rt.Unpause(ctx, c.ID); err != nil {
				return false, runtimeErr("unpause", err)
			}
		}
		if err := s.rt.Stop(ctx, c.ID, stopGrace); err != nil {
			return false, runtimeErr("stop", err)
		}
	case sb.State == sandpit.StateRunning && c.State == "paused":
		return false, s.reconciled(ctx, EventPaused, sb, sandpit.StatePaused, "")
	case sb.State == sandpit.StateRunning && c.State != "running":
		return true, nil
	case sb.State == sandpit.StatePaused && c.State == "running":
		return false, s.reconciled(ctx, EventResumed, sb, sandpit.StateRunning, "")
	case sb.State == sandpit.StatePaused && c.State != "paused":
		return false, s.reconciled(ctx, EventDied, sb, sandpit.StateStopped, sandpit.ReasonExited)
	}
	return false, nil
}

// reconciled records the state reconcile found sb's container in, and
// announces it: a container that went away or exited while the daemon was
// down died, one paused or unpaused meanwhile was paused or resumed.
func (s *Service) reconciled(ctx context.Context, typ EventType, sb sandpit.Sandbox, state sandpit.State, reason string) error {
	_, err := s.transition(ctx, change{typ: typ, from: sb, state: state, reason: reason, reread: true})
	return err
}

// restartAll starts the given sandboxes' containers again, a bounded number
// at a time.
func (s *Service) restartAll(ctx context.Context, list []sandpit.Sandbox) {
	n := s.cfg.RestartParallel
	if n <= 0 {
		n = defaultRestartParallel
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, sb := range list {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.restartOne(ctx, sb.ID)
			s.mu.Lock()
			delete(s.starting, sb.ID)
			s.mu.Unlock()
		}()
	}
	wg.Wait()
	if len(list) > 0 {
		s.log.Info("reconcile: restarts done", "count", len(list))
	}
}

func (s *Service) restartOne(ctx context.Context, id string) {
	unlock, err := s.locks.lock(ctx, id)
	if err != nil {
		return
	}
	defer unlock()
	// The row is read again under the lock: a user may have stopped or
	// deleted the sandbox while it waited for its turn.
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil || sb.State != sandpit.StateRunning {
		return
	}
	if err := s.startAndAwait(ctx, &sb); err != nil {
		if ctx.Err() != nil {
			// The daemon is shutting down, which is no fault of the
			// sandbox: its row stays running and the next start retries.
			return
		}
		s.log.Error("reconcile: restart sandbox", "sandbox", id, "err", err)
		if _, err := s.transition(ctx, change{typ: EventDied, from: sb, state: sandpit.StateError, reason: "restart failed", reread: true}); err != nil {
			s.log.Error("reconcile: mark error", "sandbox", id, "err", err)
		}
	}
}

// unwindLocked removes what an interrupted create left: its routes, its
// container and its row.
func (s *Service) unwindLocked(ctx context.Context, sb sandpit.Sandbox) error {
	s.removeRoutes(ctx, sb.ID)
	s.forgetIP(sb.ID)
	if err := s.rt.Remove(ctx, sb.ContainerID); err != nil {
		return runtimeErr("remove container", err)
	}
	// A create never announced the sandbox, so its unwinding is not
	// announced either.
	if err := s.removeRow(ctx, "", sb); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		return err
	}
	return nil
}

// allSandboxes reads every row (of the given states; nil = all).
func (s *Service) allSandboxes(ctx context.Context, states []sandpit.State) ([]sandpit.Sandbox, error) {
	var all []sandpit.Sandbox
	token := ""
	for {
		page, next, err := s.store.ListSandboxes(ctx, sandpit.ListOptions{Limit: 500, PageToken: token, States: states})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}

// Janitor finishes rows stuck in creating or deleting without waiting for a
// restart: a create whose rollback could not delete its row, a delete whose
// engine call failed. A row whose lock is held belongs to an operation still
// running and is left alone.
func (s *Service) Janitor(ctx context.Context) int {
	rows, err := s.allSandboxes(ctx, []sandpit.State{sandpit.StateCreating, sandpit.StateDeleting})
	if err != nil {
		s.log.Error("janitor: list", "err", err)
		return 0
	}
	n := 0
	for _, sb := range rows {
		unlock, ok := s.locks.tryLock(sb.ID)
		if !ok {
			continue
		}
		cur, err := s.store.GetSandbox(ctx, sb.ID)
		switch {
		case err != nil:
		case cur.State == sandpit.StateCreating:
			err = s.unwindLocked(ctx, cur)
		case cur.State == sandpit.StateDeleting:
			err = s.deleteLocked(ctx, cur.ID, EventDeleted)
		}
		unlock()
		if err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			s.log.Error("janitor", "sandbox", sb.ID, "err", err)
			continue
		}
		s.log.Info("janitor: finished stuck sandbox", "sandbox", sb.ID, "state", sb.State)
		n++
	}
	s.janitorContainers(ctx)
	return n
}

// janitorContainers removes containers without a row and stops containers
// whose row says stopped. Both appear when an engine call timed out here but
// reached the engine later (a hung engine that recovers): the create or
// start the daemon gave up on happens after all.
func (s *Service) janitorContainers(ctx context.Context) {
	containers, err := s.rt.List(ctx, s.ownLabels())
	if err != nil {
		s.log.Error("janitor: list containers", "err", err)
		return
	}
	for _, c := range containers {
		if c.SandboxID == "" {
			continue
		}
		id := c.SandboxID
		if _, pooled := c.Labels[driver.LabelPool]; pooled {
			if id = s.janitorPooled(ctx, c); id == "" {
				continue
			}
		}
		unlock, ok := s.locks.tryLock(id)
		if !ok {
			continue
		}
		sb, err := s.store.GetSandbox(ctx, id)
		switch {
		case errors.Is(err, sandpit.ErrNotFound):
			s.log.Warn("janitor: removing orphan container", "container", c.ID, "sandbox", id)
			err = s.rt.Remove(ctx, c.ID)
		case err == nil && sb.State == sandpit.StateStopped && c.State == "running":
			s.log.Warn("janitor: stopping container of a stopped sandbox", "sandbox", id)
			err = s.rt.Stop(ctx, c.ID, stopGrace)
		}
		unlock()
		if err != nil {
			s.log.Error("janitor: container", "container", c.ID, "err", err)
		}
	}
}

// RunJanitor runs the janitor every interval until ctx ends.
func (s *Service) RunJanitor(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() { s.Janitor(ctx) })
}

// installRoutes installs every route of one sandbox towards ip: the agent's
// preview route (E2B clients reach 49983-<id>.<domain>), each exposed port
// and each custom domain.
func (s *Service) installRoutes(ctx context.Context, id, ip string) error {
	if s.router == nil {
		return nil
	}
	routes, err := s.sandboxRoutes(ctx, id, ip)
	if err != nil {
		return err
	}
	// Every route is tried even after one fails, so one bad route does not
	// take the sandbox's other routes down with it.
	var errs []error
	for _, r := range routes {
		if err := s.router.Install(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("%w: install %s: %v", ErrRouter, r.Key(), err))
		}
	}
	return errors.Join(errs...)
}

// removeRoutes removes every route that belongs to a sandbox; failures are
// logged, since the routes point at a container that no longer serves.
func (s *Service) removeRoutes(ctx context.Context, id string) {
	if s.router == nil {
		return
	}
	routes, err := s.router.Routes(ctx)
	if err != nil {
		s.log.Error("list routes", "err", err)
		return
	}
	for _, r := range routes {
		if r.SandboxID == id {
			if err := s.router.Remove(ctx, r); err != nil {
				s.log.Error("remove route", "route", r.Key(), "err", err)
			}
		}
	}
}
