package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/events"
)

// defaultRestartParallel bounds how many sandboxes a start brings back at
// once: each restart waits for an agent, and a hundred at a time would only
// make every one of them slower.
const defaultRestartParallel = 8

// Reconcile makes the store and the engine agree after a restart and
// returns once every sandbox has been checked (StartReconcile, then
// WaitChecked); sandboxes whose containers must be started again still come
// back in the background.
func (s *Service) Reconcile(ctx context.Context) error {
	if err := s.StartReconcile(ctx); err != nil {
		return err
	}
	return s.WaitChecked(ctx)
}

// StartReconcile begins making the store and the engine agree after a
// restart and returns without waiting for the engine, so the API serves at
// once whatever the number of sandboxes. Every row the previous process left
// is unchecked until its check ran: in the background (checkParallel at a
// time, from one engine listing), or first thing under the sandbox's lock
// when a call needs it sooner (then from an inspect of its container). An
// unchecked running sandbox shows as starting and no call acts on it before
// its check, so nothing is answered from a row the engine may contradict.
// One sandbox's failure is logged and skipped: it never stops the others or
// the daemon.
//
// The check of one sandbox:
//
//   - a row left in creating (its create died with the previous process) is
//     unwound; a row left in deleting is deleted;
//   - a row whose container is gone is marked error;
//   - stopped row, running container: the container is stopped;
//   - running row, paused container: the row becomes paused;
//   - memory-paused row, exited container (the engine restarted, and the
//     frozen processes with it): the row stays paused, as a filesystem
//     pause with the reason memory lost, unless the sandbox has a complete
//     checkpoint, whose pause is kept as it is;
//   - running row, exited container, complete checkpoint (a checkpointed
//     pause died before its row): the row becomes memory-paused;
//   - filesystem-paused row, exited container: nothing to do;
//   - filesystem-paused row, running container (a resume died after its
//     start): the row becomes running and the agent is awaited;
//   - running row, exited container: the container is started again, in
//     the background, RestartParallel at a time, showing as starting;
//   - a sandbox whose container runs (or is frozen) gets its firewall rules
//     asserted again, failing closed, and a running one its routes.
//
// After the checks a managed container the store does not know is removed.
func (s *Service) StartReconcile(ctx context.Context) error {
	all, err := s.allSandboxes(ctx, nil)
	if err != nil {
		return err
	}
	// Firewall rules are durable intent like routes. Those of sandboxes
	// that cannot be running go now, before anything is served (so no
	// create of this run can lose its rules to the prune); those of the
	// others stay until their check decides.
	keep := map[string]bool{}
	done := make(chan struct{})
	s.mu.Lock()
	for _, sb := range all {
		s.unchecked[sb.ID] = true
		if sb.State == sandpit.StateRunning || sb.State == sandpit.StatePaused {
			keep[sb.ID] = true
		}
	}
	s.checked = done
	s.reconcileCtx = ctx
	s.mu.Unlock()
	s.pruneFirewall(ctx, keep)
	s.background(func() {
		defer close(done)
		s.checkAll(ctx, all)
	})
	return nil
}

// WaitChecked waits until every sandbox StartReconcile left unchecked has
// been checked, or ctx ends.
func (s *Service) WaitChecked(ctx context.Context) error {
	s.mu.Lock()
	done := s.checked
	s.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checksDone reports whether the checks StartReconcile began have ended.
func (s *Service) checksDone() bool {
	s.mu.Lock()
	done := s.checked
	s.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// checkParallel bounds how many sandboxes the background checks handle at
// once: each costs engine and firewall calls, which the engine serialises
// anyway, and calls arriving meanwhile need their share.
const checkParallel = 4

// checkAll checks the given sandboxes from one engine listing, then removes
// the containers no row knows, then restarts those whose containers must
// run again.
func (s *Service) checkAll(ctx context.Context, all []sandpit.Sandbox) {
	lookup := s.inspectContainer
	containers, err := s.rt.List(ctx, s.ownLabels())
	if err == nil {
		// Free pooled containers are kept or removed here; adopted ones
		// come back under their sandbox's id.
		containers, err = s.pool.reconcilePool(ctx, containers)
	}
	if err != nil {
		// Each sandbox is then inspected on its own.
		s.log.Error("reconcile: list containers", "err", runtimeErr("list containers", err))
		containers = nil
	} else {
		byID := map[string]driver.Container{}
		for _, c := range containers {
			byID[c.SandboxID] = c
		}
		lookup = func(_ context.Context, sb sandpit.Sandbox) (driver.Container, bool, error) {
			c, ok := byID[sb.ID]
			return c, ok, nil
		}
	}
	var (
		mu      sync.Mutex
		restart []string
		wg      sync.WaitGroup
		sem     = make(chan struct{}, checkParallel)
	)
	for _, sb := range all {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			unlock, err := s.locks.lock(ctx, sb.ID)
			if err != nil {
				return
			}
			again, err := s.checkLocked(ctx, sb.ID, lookup)
			unlock()
			if err != nil {
				s.log.Error("reconcile: check sandbox", "sandbox", sb.ID, "err", err)
			}
			if again {
				mu.Lock()
				restart = append(restart, sb.ID)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if containers != nil {
		s.removeOrphans(ctx, containers)
	}
	s.restartAll(ctx, restart)
}

// removeOrphans removes the listed managed containers no row knows. The
// rows are read after the listing: a create of this run inserts its row
// before it makes its container, so a container it made is never taken for
// an orphan.
func (s *Service) removeOrphans(ctx context.Context, containers []driver.Container) {
	rows, err := s.allSandboxes(ctx, nil)
	if err != nil {
		s.log.Error("reconcile: orphans", "err", err)
		return
	}
	known := map[string]bool{}
	for _, sb := range rows {
		known[sb.ID] = true
	}
	for _, c := range containers {
		if !known[c.SandboxID] {
			s.log.Warn("reconcile: removing orphan container", "container", c.ID, "sandbox", c.SandboxID)
			if err := s.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, driver.ErrNotFound) {
				s.log.Error("reconcile: remove orphan container", "container", c.ID, "err", err)
			}
		}
	}
}

// containerLookup finds a sandbox's container: found is false when the
// engine has none.
type containerLookup func(ctx context.Context, sb sandpit.Sandbox) (c driver.Container, found bool, err error)

func (s *Service) inspectContainer(ctx context.Context, sb sandpit.Sandbox) (driver.Container, bool, error) {
	c, err := s.rt.Inspect(ctx, sb.ContainerID)
	if errors.Is(err, driver.ErrNotFound) {
		return c, false, nil
	}
	if err != nil {
		return c, false, runtimeErr("inspect "+sb.ID, err)
	}
	return c, true, nil
}

// lock takes a sandbox's lock for an operation, checking the sandbox first
// if StartReconcile left it unchecked; when that check cannot be made (the
// engine fails), the lock is released and the error returned, so no
// operation acts on an unchecked sandbox.
func (s *Service) lock(ctx context.Context, id string) (func(), error) {
	unlock, err := s.locks.lock(ctx, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	unchecked := s.unchecked[id]
	s.mu.Unlock()
	if !unchecked {
		return unlock, nil
	}
	again, err := s.checkLocked(ctx, id, s.inspectContainer)
	if err != nil && s.isUnchecked(id) {
		unlock()
		return nil, err
	}
	if err != nil {
		s.log.Error("reconcile: check sandbox", "sandbox", id, "err", err)
	}
	if again {
		// The restart needs the lock this call holds: it runs behind it,
		// as the background restarts do, and the sandbox shows as
		// starting meanwhile.
		s.mu.Lock()
		rctx := s.reconcileCtx
		s.mu.Unlock()
		s.background(func() { s.restartAll(rctx, []string{id}) })
	}
	return unlock, nil
}

// ensureChecked checks a sandbox StartReconcile left unchecked, for a call
// that is about to read or use it.
func (s *Service) ensureChecked(ctx context.Context, id string) error {
	if !s.isUnchecked(id) {
		return nil
	}
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return err
	}
	unlock()
	return nil
}

func (s *Service) isUnchecked(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unchecked[id]
}

// checkLocked checks one sandbox under its lock (see StartReconcile) and
// reports whether its container must be started again; the sandbox is then
// marked starting. A sandbox already checked is left alone. The sandbox
// stays unchecked only when its container could not be looked up; any other
// failure is logged by the caller and the sandbox counts as checked, as a
// reconcile always skipped a sandbox it could not fix.
func (s *Service) checkLocked(ctx context.Context, id string, lookup containerLookup) (restart bool, err error) {
	if !s.isUnchecked(id) {
		return false, nil
	}
	checked := func(starting bool) {
		s.mu.Lock()
		delete(s.unchecked, id)
		if starting {
			s.starting[id] = true
		}
		s.mu.Unlock()
	}
	sb, err := s.store.GetSandbox(ctx, id)
	if errors.Is(err, sandpit.ErrNotFound) {
		checked(false)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c, exists, err := lookup(ctx, sb)
	if err != nil {
		return false, err
	}
	// Nothing changes an unchecked row but its check, so its state is the
	// one StartReconcile saw: running or paused rows kept their rules.
	kept := sb.State == sandpit.StateRunning || sb.State == sandpit.StatePaused
	again, err := s.reconcileOne(ctx, sb, c, exists)
	if again {
		checked(true)
		return true, nil
	}
	defer checked(false)
	if err != nil {
		return false, err
	}
	live := exists && c.IP != "" && (c.State == "running" || c.State == "paused") &&
		(sb.State == sandpit.StateRunning || sb.State == sandpit.StatePaused)
	if !live {
		if kept {
			s.removeFirewall(ctx, id)
		}
		return false, nil
	}
	if err := s.applyFirewall(ctx, sb, c.IP); err != nil {
		s.log.Error("reconcile: firewall; stopping the sandbox", "sandbox", id, "err", err)
		cur, gerr := s.store.GetSandbox(ctx, id)
		if gerr != nil {
			return false, gerr
		}
		if _, err := s.stopLocked(ctx, cur); err != nil && !errors.Is(err, ErrDeletedOnStop) {
			return false, fmt.Errorf("stop unconfined sandbox: %w", err)
		}
		return false, nil
	}
	if err := s.syncLimits(ctx, sb, c); err != nil {
		s.log.Error("reconcile: apply the stored limits", "sandbox", id, "err", err)
	}
	if c.State == "running" {
		if err := s.installRoutes(ctx, id, c.IP); err != nil {
			s.log.Error("reconcile: install routes", "sandbox", id, "err", err)
		}
	}
	return false, nil
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

// reconcileOne fixes one sandbox (its lock held) and reports whether its
// container needs starting again.
func (s *Service) reconcileOne(ctx context.Context, sb sandpit.Sandbox, c driver.Container, exists bool) (restart bool, err error) {
	switch {
	case sb.State == sandpit.StateCreating:
		s.log.Warn("reconcile: unwinding interrupted create", "sandbox", sb.ID)
		return false, s.unwindLocked(ctx, sb)
	case sb.State == sandpit.StateDeleting:
		s.log.Warn("reconcile: finishing interrupted delete", "sandbox", sb.ID)
		return false, s.deleteLocked(ctx, sb.ID, events.Deleted)
	case archived(sb) && exists:
		// The archive was recorded and its container not yet removed, or
		// a restore died before its state change: the image holds the
		// files, and the container goes.
		s.log.Warn("reconcile: removing the container of an archived sandbox", "sandbox", sb.ID)
		if err := s.rt.Remove(ctx, c.ID); err != nil {
			return false, runtimeErr("remove container", err)
		}
	case archived(sb):
	case !exists:
		if sb.State != sandpit.StateError {
			s.log.Warn("reconcile: container gone", "sandbox", sb.ID)
			return false, s.reconciled(ctx, events.Died, sb, sandpit.StateError, sandpit.ReasonRemoved)
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
		return false, s.reconciled(ctx, events.Paused, sb, sandpit.StatePaused, "")
	case sb.State == sandpit.StateRunning && c.State != "running" && s.ckpt.has(sb.ID):
		// A memory pause died after its checkpoint was complete and before
		// the row said paused: the processes are on disk.
		s.log.Warn("reconcile: finishing an interrupted checkpointed pause", "sandbox", sb.ID)
		return false, s.reconciled(ctx, events.Paused, sb, sandpit.StatePaused, "")
	case sb.State == sandpit.StateRunning && c.State != "running":
		// A checkpoint that died before it was complete left its partial
		// directory; the container starts again, booted anew.
		s.ckpt.drop(sb.ID)
		return true, nil
	case sb.State == sandpit.StatePaused && c.State == "running":
		// A resume from a checkpoint died after its start: the checkpoint
		// was restored, and goes.
		s.ckpt.drop(sb.ID)
		if sb.PauseMode == sandpit.PauseFilesystem {
			// A resume died after its start: the sandbox runs, and its
			// agent is checked like any running sandbox's.
			return true, s.reconciled(ctx, events.Resumed, sb, sandpit.StateRunning, "")
		}
		return false, s.reconciled(ctx, events.Resumed, sb, sandpit.StateRunning, "")
	case sb.State == sandpit.StatePaused && sb.PauseMode == sandpit.PauseFilesystem && c.State == "paused":
		// Frozen by someone else while it was a filesystem pause: it is
		// stopped again, as its mode says.
		if err := s.rt.Unpause(ctx, c.ID); err != nil {
			return false, runtimeErr("unpause", err)
		}
		if err := s.rt.Stop(ctx, c.ID, stopGrace); err != nil {
			return false, runtimeErr("stop", err)
		}
	case sb.State == sandpit.StatePaused && sb.PauseMode == sandpit.PauseFilesystem:
		// A filesystem pause's container is stopped: nothing to do.
	case sb.State == sandpit.StatePaused && s.ckpt.has(sb.ID):
		// A checkpointed memory pause: its container is stopped on
		// purpose, its processes are on disk.
	case sb.State == sandpit.StatePaused && c.State != "paused":
		// The frozen processes did not outlive the engine (a dockerd or
		// host restart kills them): the filesystem is all that is left,
		// and the sandbox stays paused as a filesystem pause that says so.
		s.log.Warn("reconcile: memory pause lost with the engine; kept as a filesystem pause", "sandbox", sb.ID)
		_, err := s.transition(ctx, change{typ: events.Paused, from: sb, state: sandpit.StatePaused,
			mode: sandpit.PauseFilesystem, reason: sandpit.ReasonMemoryLost, reread: true})
		return false, err
	}
	return false, nil
}

// reconciled records the state reconcile found sb's container in, and
// announces it: a container that went away or exited while the daemon was
// down died, one paused or unpaused meanwhile was paused or resumed.
func (s *Service) reconciled(ctx context.Context, typ events.Type, sb sandpit.Sandbox, state sandpit.State, reason string) error {
	_, err := s.transition(ctx, change{typ: typ, from: sb, state: state, reason: reason, reread: true})
	return err
}

// restartAll starts the given sandboxes' containers again, a bounded number
// at a time.
func (s *Service) restartAll(ctx context.Context, list []string) {
	n := s.cfg.RestartParallel
	if n <= 0 {
		n = defaultRestartParallel
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, id := range list {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.restartOne(ctx, id)
			s.mu.Lock()
			delete(s.starting, id)
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
	if err := s.startAndAwait(ctx, &sb, false); err != nil {
		if ctx.Err() != nil {
			// The daemon is shutting down, which is no fault of the
			// sandbox: its row stays running and the next start retries.
			return
		}
		s.log.Error("reconcile: restart sandbox", "sandbox", id, "err", err)
		if _, err := s.transition(ctx, change{typ: events.Died, from: sb, state: sandpit.StateError, reason: "restart failed", reread: true}); err != nil {
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
	// Until reconcile's checks end, they do this work, and a container
	// not listed yet may belong to a row they have not read.
	if !s.checksDone() {
		return 0
	}
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
			err = s.deleteLocked(ctx, cur.ID, events.Deleted)
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
	n += s.tpl.Janitor(ctx)
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
		if c.Labels[driver.LabelPool] != "" {
			if id = s.pool.janitorPooled(ctx, c); id == "" {
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
