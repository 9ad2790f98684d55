package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/timing"
)

// stopGrace is how long a stopped container's processes get to exit before
// the engine kills them.
const stopGrace = 5 * time.Second

// runtimeErr wraps an engine failure as ErrRuntime while keeping the engine's
// own error kind (a timeout, a missing container) visible to errors.Is.
func runtimeErr(what string, err error) error {
	return &EngineError{What: what, Err: err}
}

// EngineError is a failure of the container engine during one step of an
// operation. Its text holds the engine's own message, for the daemon's log;
// the API answers with What alone (api.Classify), since the engine's text
// describes the host (paths, names of other containers, the engine's
// configuration), not the caller's request.
type EngineError struct {
	What string // the step, in the daemon's words ("start container")
	Err  error  // the engine's error
}

func (e *EngineError) Error() string {
	return ErrRuntime.Error() + ": " + e.What + ": " + e.Err.Error()
}

// Is makes an EngineError an ErrRuntime.
func (e *EngineError) Is(target error) bool { return target == ErrRuntime }

// Unwrap keeps the engine's error kind visible to errors.Is.
func (e *EngineError) Unwrap() error { return e.Err }

// startAndAwait starts the container, learns its address, waits for the agent
// and (re)installs the sandbox's routes, which point at that address. On
// failure the container is stopped again, so a failed start never leaves a
// running container under a row that says otherwise. restored says that the
// start restores a checkpoint (checkpoints.resume), whose agent and image
// command were restored running, and are neither given their settings nor
// started again.
func (s *Service) startAndAwait(ctx context.Context, sb *sandpit.Sandbox, restored bool) error {
	s.forgetIP(sb.ID)
	if !restored {
		// A marker a killed resume left would make this start restore a
		// checkpoint nobody asked for.
		if err := s.ckpt.clearMarker(sb.ContainerID); err != nil {
			return runtimeErr("clear restore marker", err)
		}
	}
	t0 := time.Now()
	if err := s.rt.Start(ctx, sb.ContainerID); err != nil {
		return runtimeErr("start container", err)
	}
	err := func() error {
		c, err := s.rt.Inspect(ctx, sb.ContainerID)
		if err != nil {
			return runtimeErr("inspect container", err)
		}
		if c.IP == "" {
			// A container without an address is one that already exited:
			// its agent could not start, and said why on its output.
			return s.agentDied(ctx, sb, c)
		}
		// The sandbox's egress policy goes in before its agent is reported
		// ready; a sandbox whose policy is not in place must not run, so a
		// failure here undoes the start.
		if err := s.applyFirewall(ctx, *sb, c.IP); err != nil {
			return err
		}
		if err := s.syncLimits(ctx, *sb, c); err != nil {
			return runtimeErr("apply limits", err)
		}
		timing.Phase(ctx, "engine", t0)
		t0 = time.Now()
		if err := s.awaitAgent(ctx, sb, c.IP); err != nil {
			return err
		}
		if !restored {
			// An adopted pooled container's agent starts again with its
			// pool token and no sandbox settings; they are given to it
			// again first.
			if err := s.pool.reinitAdopted(ctx, *sb, c.IP); err != nil {
				return err
			}
			// What the image runs at start runs again: a stop ended it.
			if err := s.startImage(ctx, *sb, false); err != nil {
				return err
			}
		}
		timing.Phase(ctx, "agent", t0)
		s.mu.Lock()
		s.ips[sb.ID] = c.IP
		s.mu.Unlock()
		// A route that cannot be installed (another program holds its host
		// port) does not make the sandbox any less started: the failure is
		// logged, the other routes serve, and a retry of that exposure
		// installs it again once the cause is gone.
		if err := s.installRoutes(ctx, sb.ID, c.IP); err != nil {
			s.log.Error("install routes", "sandbox", sb.ID, "err", err)
		}
		return nil
	}()
	if err != nil {
		s.undoStart(ctx, sb)
	}
	return err
}

// exitedContainer ends the wait for an agent whose container exited.
type exitedContainer struct{ c driver.Container }

func (e *exitedContainer) Error() string { return "container exited" }

// awaitAgent waits for the agent to answer, and stops waiting as soon as its
// container exits: an agent that cannot start fails the create with its own
// words at once rather than after the whole health timeout.
func (s *Service) awaitAgent(ctx context.Context, sb *sandpit.Sandbox, ip string) error {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-tk.C:
			}
			if c, err := s.rt.Inspect(hctx, sb.ContainerID); err == nil && c.State != "running" && c.State != "paused" {
				cancel(&exitedContainer{c})
				return
			}
		}
	}()
	err := s.waitHealthy(hctx, ip)
	var exited *exitedContainer
	if err != nil && errors.As(context.Cause(hctx), &exited) {
		return s.agentDied(ctx, sb, exited.c)
	}
	return err
}

// agentDied is the error of a sandbox whose container exited before its
// agent answered: the agent's (or the runtime's) own last words and the exit
// code, which say what went wrong, where "no address" would not.
func (s *Service) agentDied(ctx context.Context, sb *sandpit.Sandbox, c driver.Container) error {
	out, err := s.rt.Output(ctx, sb.ContainerID, 10)
	if err != nil {
		s.log.Warn("read the output of a container that exited at start", "sandbox", sb.ID, "err", err)
	}
	words := strings.Join(strings.Fields(strings.ReplaceAll(out, "\n", " ; ")), " ")
	if len(words) > 1000 {
		words = "..." + words[len(words)-1000:]
	}
	if words == "" {
		words = "it wrote nothing"
	}
	s.log.Error("sandbox agent exited at start", "sandbox", sb.ID, "exit_code", c.ExitCode, "output", out)
	return fmt.Errorf("%w: its container exited at start with code %d: %s", ErrAgentUnhealthy, c.ExitCode, words)
}

// undoStart takes down what a failed start brought up: routes first, so
// nothing points at the container while it stops.
func (s *Service) undoStart(ctx context.Context, sb *sandpit.Sandbox) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	s.removeRoutes(rctx, sb.ID)
	s.forgetIP(sb.ID)
	if err := s.rt.Stop(rctx, sb.ContainerID, 0); err != nil && !errors.Is(err, driver.ErrNotFound) {
		s.log.Error("undo start: stop container", "sandbox", sb.ID, "err", err)
	}
	// The rules are keyed to the address the container had, which the
	// engine may hand to the next container.
	s.removeFirewall(rctx, sb.ID)
}

// ownLabels select the containers of this daemon instance.
func (s *Service) ownLabels() map[string]string {
	l := map[string]string{driver.LabelManaged: "true"}
	if s.cfg.Instance != "" {
		l[driver.LabelInstance] = s.cfg.Instance
	}
	return l
}

// containerLabels are the extra labels of every container this daemon makes.
func (s *Service) containerLabels() map[string]string {
	return driver.InstanceLabels(s.cfg.ExtraLabels, s.cfg.Instance)
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

// present overlays what only this process knows on a stored row: a running
// sandbox still being brought back after a restart, or not yet checked
// against its container since the restart, shows as starting.
func (s *Service) present(sb sandpit.Sandbox) sandpit.Sandbox {
	if sb.State != sandpit.StateRunning {
		return sb
	}
	s.mu.Lock()
	starting := s.starting[sb.ID] || s.unchecked[sb.ID]
	s.mu.Unlock()
	if starting {
		sb.State = sandpit.StateStarting
	}
	return sb
}

// GetSandbox returns a sandbox by id.
func (s *Service) GetSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	sb, err := s.sandbox(ctx, id)
	if err == nil && s.isUnchecked(id) {
		// One sandbox asked for by id is checked at once (an engine
		// inspect) rather than shown as starting until the background
		// checks reach it.
		if err := s.ensureChecked(ctx, id); err != nil {
			return sandpit.Sandbox{}, err
		}
		sb, err = s.sandbox(ctx, id)
	}
	if err != nil {
		return s.present(sb), err
	}
	return s.withMounts(ctx, s.present(sb)), nil
}

// GetSandboxByIDOrName resolves an id first, then a name, as Daytona does.
// Names are unique per daemon, but another owner's sandbox found by name is
// not found, like one found by id.
func (s *Service) GetSandboxByIDOrName(ctx context.Context, idOrName string) (sandpit.Sandbox, error) {
	sb, err := s.sandbox(ctx, idOrName)
	if errors.Is(err, sandpit.ErrNotFound) {
		sb, err = s.store.GetSandboxByName(ctx, idOrName)
		if err == nil && !identity.Visible(identity.Of(ctx), sb.Owner) {
			return sandpit.Sandbox{}, fmt.Errorf("get sandbox by name %q: %w", idOrName, sandpit.ErrNotFound)
		}
	}
	if err == nil && s.isUnchecked(sb.ID) {
		if err := s.ensureChecked(ctx, sb.ID); err != nil {
			return sandpit.Sandbox{}, err
		}
		return s.GetSandbox(ctx, sb.ID)
	}
	if err != nil {
		return s.present(sb), err
	}
	return s.withMounts(ctx, s.present(sb)), nil
}

// Filter limits: a listing is a read, and a request must not be able to turn
// it into an unbounded query.
const (
	maxListLabels = 32
	maxListStates = 8
)

// ListSandboxes lists the caller's sandboxes (an admin's lists every owner's).
func (s *Service) ListSandboxes(ctx context.Context, opts sandpit.ListOptions) ([]sandpit.Sandbox, string, error) {
	if len(opts.Labels) > maxListLabels {
		return nil, "", invalidf("at most %d label filters", maxListLabels)
	}
	if len(opts.States) > maxListStates {
		return nil, "", invalidf("at most %d state filters", maxListStates)
	}
	for _, st := range opts.States {
		switch st {
		case sandpit.StateCreating, sandpit.StateRunning, sandpit.StateStopped, sandpit.StatePaused,
			sandpit.StateError, sandpit.StateDeleting:
		default:
			return nil, "", invalidf("unknown state %q", st)
		}
	}
	page, next, err := s.store.ListSandboxes(ctx, scopeList(ctx, opts))
	for i := range page {
		page[i] = s.present(page[i])
	}
	return page, next, err
}

// DeleteSandbox removes the routes, the container and the row (its ports and
// domains go with it by cascade). The row moves to deleting first, so a
// delete that fails half-way (a crash, an engine that stops answering) is
// finished by the janitor or the next start instead of leaving a row whose
// container is gone.
func (s *Service) DeleteSandbox(ctx context.Context, id string) (err error) {
	defer func() {
		if !errors.Is(err, sandpit.ErrNotFound) {
			s.audit(ctx, "sandbox.delete", id, err)
		}
	}()
	return s.deleteSandbox(ctx, id, events.Deleted)
}

// deleteSandbox deletes under the sandbox's lock and announces the deletion
// as typ (deleted, or expired for the sweeper).
func (s *Service) deleteSandbox(ctx context.Context, id string, typ events.Type) error {
	if _, err := s.sandbox(ctx, id); err != nil {
		return err
	}
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	return s.deleteLocked(ctx, id, typ)
}

func (s *Service) deleteLocked(ctx context.Context, id string, typ events.Type) error {
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	// The agent is going away: requests for it are refused at once instead
	// of waiting on an address that stops answering.
	defer s.leave(id)()
	if err := s.markDeleting(ctx, sb); err != nil {
		return err
	}
	if err := s.teardown(ctx, sb); err != nil {
		return err
	}
	_, err = s.transition(ctx, change{typ: typ, from: sb, then: func() { s.cluster.release(ctx, id) }})
	if errors.Is(err, sandpit.ErrNotFound) {
		return nil // someone else's delete won, and announced it
	}
	return err
}

// teardown removes what a sandbox has on this node besides its rows: routes,
// TCP listeners, its container and its firewall rules.
func (s *Service) teardown(ctx context.Context, sb sandpit.Sandbox) error {
	s.removeRoutes(ctx, sb.ID)
	s.forgetIP(sb.ID)
	s.forgetTouch(sb.ID)
	if err := s.rt.Remove(ctx, sb.ContainerID); err != nil {
		return runtimeErr("remove container", err)
	}
	s.removeFirewall(ctx, sb.ID)
	if sb.ArchiveImage != "" {
		s.removeArchiveImages(ctx, sb.ID)
	}
	s.ckpt.drop(sb.ID)
	return nil
}

// lockRow takes a sandbox's lock and reads its row under it; the caller
// releases the lock with the returned function, and only on success.
func (s *Service) lockRow(ctx context.Context, id string) (sandpit.Sandbox, func(), error) {
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return sandpit.Sandbox{}, nil, err
	}
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		unlock()
		return sb, nil, err
	}
	return sb, unlock, nil
}

// StopSandbox stops a sandbox's container, keeping its filesystem.
func (s *Service) StopSandbox(ctx context.Context, id string) (_ sandpit.Sandbox, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return sb, err
	}
	defer unlock()
	return s.stopLocked(ctx, sb)
}

// stopLocked is StopSandbox under the sandbox's lock.
func (s *Service) stopLocked(ctx context.Context, sb sandpit.Sandbox) (sandpit.Sandbox, error) {
	return s.stopLockedFor(ctx, sb, "")
}

// stopLockedFor is stopLocked recording why the sandbox stopped ("" for a
// stop on request).
func (s *Service) stopLockedFor(ctx context.Context, sb sandpit.Sandbox, reason string) (sandpit.Sandbox, error) {
	id := sb.ID
	switch sb.State {
	case sandpit.StateStopped:
		return sb, nil
	case sandpit.StateCreating, sandpit.StateDeleting, sandpit.StateError:
		return sb, fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, id, sb.State)
	}
	// Routes go before the container stops: once it stops, its address can
	// be handed to another container, and a route left behind would serve
	// that one under this sandbox's URL.
	s.removeRoutes(ctx, id)
	s.forgetIP(id)
	checkpointed := s.ckpt.has(id)
	if sb.State == sandpit.StatePaused && sb.PauseMode != sandpit.PauseFilesystem && !checkpointed {
		if err := s.rt.Unpause(ctx, sb.ContainerID); err != nil {
			return sb, runtimeErr("unpause", err)
		}
	}
	leave := s.leave(id)
	defer leave()
	if err := s.rt.Stop(ctx, sb.ContainerID, stopGrace); err != nil {
		s.restoreRoutes(ctx, id)
		return sb, runtimeErr("stop container", err)
	}
	s.removeFirewall(ctx, id)
	after, err := s.transition(ctx, change{typ: events.Stopped, from: sb, state: sandpit.StateStopped, reason: reason, reread: true})
	if checkpointed && err == nil {
		// A stopped sandbox starts anew: its checkpoint is of no use.
		s.ckpt.drop(id)
	}
	if err != nil || after.AutoDelete != 0 {
		return after, err
	}
	// An ephemeral sandbox (auto-delete 0) goes as soon as it stops, under
	// the same lock, so nothing can start it in between; the caller learns
	// it from ErrDeletedOnStop and the returned row.
	if err := s.deleteLocked(ctx, id, events.Deleted); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		return after, err
	}
	return after, ErrDeletedOnStop
}

// restoreRoutes puts a running sandbox's routes back after an operation that
// removed them failed before its container stopped.
func (s *Service) restoreRoutes(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	ip, err := s.sandboxIP(ctx, id)
	switch {
	case errors.Is(err, ErrPaused):
		// A paused sandbox has no routes by design; they come back when it
		// resumes.
		s.log.Info("restore routes: sandbox is paused; its routes come back when it resumes", "sandbox", id)
	case err != nil:
		s.log.Error("restore routes", "sandbox", id, "err", err)
	default:
		if err := s.installRoutes(ctx, id, ip); err != nil {
			s.log.Error("restore routes", "sandbox", id, "err", err)
		}
	}
}

// routesAfterUnpause installs the routes of a memory-paused sandbox that
// was just unfrozen. Its row still says paused (the routes go in before the
// row says running), so its address comes from the engine.
func (s *Service) routesAfterUnpause(ctx context.Context, sb sandpit.Sandbox) {
	ctx = context.WithoutCancel(ctx)
	c, err := s.rt.Inspect(ctx, sb.ContainerID)
	switch {
	case err != nil:
		s.log.Error("restore routes after resume", "sandbox", sb.ID, "err", err)
	case c.IP == "":
		s.log.Error("restore routes after resume: the container has no address", "sandbox", sb.ID)
	default:
		if err := s.installRoutes(ctx, sb.ID, c.IP); err != nil {
			s.log.Error("restore routes after resume", "sandbox", sb.ID, "err", err)
		}
	}
}

// StartSandbox starts a stopped sandbox (or resumes a paused one) and waits
// for its agent.
func (s *Service) StartSandbox(ctx context.Context, id string) (_ sandpit.Sandbox, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return sb, err
	}
	defer unlock()
	switch sb.State {
	case sandpit.StateRunning:
		return sb, nil
	case sandpit.StatePaused:
		return s.resumeLocked(ctx, sb)
	case sandpit.StateCreating, sandpit.StateDeleting:
		return sb, fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, id, sb.State)
	}
	if archived(sb) {
		if err := s.restoreArchived(ctx, sb); err != nil {
			return sb, err
		}
	}
	if err := s.startAndAwait(ctx, &sb, false); err != nil {
		return sb, err
	}
	// The event names the state the sandbox was started from as stopped,
	// whichever stopped-like state (error, say) its row had.
	from := sb
	from.State = sandpit.StateStopped
	after, err := s.transition(ctx, change{typ: events.Started, from: from, state: sandpit.StateRunning, reread: true})
	if err != nil && !errors.Is(err, errReread) {
		s.undoStart(ctx, &sb)
		return sb, err
	}
	return after, err
}

// PauseSandbox pauses a running sandbox in the given mode (PauseNone is a
// memory pause). Its routes go while it is paused: a frozen upstream would
// hold every connection open forever, and a stopped one's address can be
// handed to another container.
//
// A memory pause freezes the processes (the cgroup freezer). The frozen
// container outlives a restart of the daemon, not of the engine: reconcile
// then finds it exited and keeps the sandbox as a filesystem pause whose
// reason says the memory was lost. A filesystem pause stops the container
// and keeps it, files and all; its resume boots it anew.
func (s *Service) PauseSandbox(ctx context.Context, id string, mode sandpit.PauseMode) (_ sandpit.Sandbox, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	switch mode {
	case sandpit.PauseNone:
		mode = sandpit.PauseMemory
	case sandpit.PauseMemory, sandpit.PauseFilesystem:
	default:
		return sandpit.Sandbox{}, invalidf("pause mode must be %q or %q, got %q", sandpit.PauseMemory, sandpit.PauseFilesystem, mode)
	}
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return sb, err
	}
	defer unlock()
	return s.pauseLocked(ctx, sb, mode, "")
}

// pauseLocked is PauseSandbox under the sandbox's lock; reason is recorded
// with the paused state ("" for a pause on request).
func (s *Service) pauseLocked(ctx context.Context, sb sandpit.Sandbox, mode sandpit.PauseMode, reason string) (sandpit.Sandbox, error) {
	id := sb.ID
	if sb.State != sandpit.StateRunning {
		return sb, fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, id, sb.State)
	}
	s.removeRoutes(ctx, id)
	if mode == sandpit.PauseMemory && s.ckpt.enabled() {
		return s.ckpt.pause(ctx, sb, reason)
	}
	if mode == sandpit.PauseMemory {
		// The frozen container keeps its address (and its kernels), but
		// no call may reach it from now on: one sent there would wait for
		// as long as the sandbox stays paused. Calls meanwhile are told the
		// sandbox is going away, and then that it is paused.
		leave := s.leave(id)
		defer leave()
		if err := s.rt.Pause(ctx, sb.ContainerID); err != nil {
			leave()
			s.restoreRoutes(ctx, id)
			return sb, runtimeErr("pause", err)
		}
		return s.transition(ctx, change{typ: events.Paused, from: sb, state: sandpit.StatePaused, mode: mode, reason: reason, reread: true})
	}
	s.forgetIP(id)
	leave := s.leave(id)
	defer leave()
	if err := s.rt.Stop(ctx, sb.ContainerID, stopGrace); err != nil {
		s.restoreRoutes(ctx, id)
		return sb, runtimeErr("stop container", err)
	}
	s.removeFirewall(ctx, id)
	// Dying here leaves a running row over a stopped container, which
	// reconcile starts again: the sandbox runs, and a retried pause pauses
	// it.
	crashpoint.Hit(crashpoint.AfterPauseStop)
	return s.transition(ctx, change{typ: events.Paused, from: sb, state: sandpit.StatePaused, mode: mode, reason: reason, reread: true})
}

// ResumeSandbox resumes a paused sandbox: a memory pause is unfrozen, a
// filesystem pause is booted again. Resuming a sandbox that is not paused
// is a no-op, so a retry, a connect and the auto-resume of traffic share
// one path.
func (s *Service) ResumeSandbox(ctx context.Context, id string) (_ sandpit.Sandbox, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return sb, err
	}
	defer unlock()
	if sb.State != sandpit.StatePaused {
		return sb, nil
	}
	return s.resumeLocked(ctx, sb)
}

func (s *Service) resumeLocked(ctx context.Context, sb sandpit.Sandbox) (sandpit.Sandbox, error) {
	// A sandbox paused at its deadline runs for its timeout again once
	// resumed, as when it was made, and is then paused again; without this
	// it would run out the paused retention. A caller that sets its own
	// timeout after the resume (E2B's connect) wins.
	if sb.StateReason == ReasonTimeout && sb.Timeout > 0 {
		if err := s.store.SetSandboxEndAt(ctx, sb.ID, s.now().Add(sb.Timeout), s.now()); err != nil {
			return sb, err
		}
	}
	if sb.PauseMode == sandpit.PauseFilesystem {
		if err := s.startAndAwait(ctx, &sb, false); err != nil {
			return sb, err
		}
		// Dying here leaves a paused row over a running container, which
		// reconcile records as resumed.
		crashpoint.Hit(crashpoint.AfterResumeStart)
		after, err := s.transition(ctx, change{typ: events.Resumed, from: sb, state: sandpit.StateRunning, reread: true})
		if err != nil && !errors.Is(err, errReread) {
			s.undoStart(ctx, &sb)
			return sb, err
		}
		return after, err
	}
	if s.ckpt.has(sb.ID) {
		return s.ckpt.resume(ctx, sb)
	}
	if err := s.rt.Unpause(ctx, sb.ContainerID); err != nil {
		return sb, runtimeErr("unpause", err)
	}
	// Every route went when the sandbox paused, and ports and domains added
	// meanwhile were only recorded; all of them are installed now, before
	// the row says running: a preview request that sees it running goes
	// straight to the router without waiting for this resume, and must
	// find its route.
	s.routesAfterUnpause(ctx, sb)
	after, err := s.transition(ctx, change{typ: events.Resumed, from: sb, state: sandpit.StateRunning, reread: true})
	if err != nil && !errors.Is(err, errReread) {
		s.removeRoutes(context.WithoutCancel(ctx), sb.ID)
	}
	return after, err
}

// Wake outcomes of traffic for a sandbox.
type WakeOutcome int

const (
	// WakeNotPaused: the sandbox was not paused; the request goes on.
	WakeNotPaused WakeOutcome = iota + 1
	// WakeResumed: the sandbox was paused with auto-resume and now runs.
	WakeResumed
	// WakeStaysPaused: the sandbox is paused without auto-resume; only an
	// explicit resume (connect) wakes it.
	WakeStaysPaused
)

// WakeOnTraffic resumes a paused sandbox made with auto-resume, for a
// request that reached it through the E2B gateway or its preview URL; the
// request waits for the resume and is then served. It is asked on every
// such request, so a sandbox that is not paused is answered from memory.
// Concurrent requests take turns on the sandbox's lock, and the first one's
// resume makes the others' no-ops. The caller needs no credential: waking a
// sandbox that asked to be woken by traffic is what the traffic is for.
func (s *Service) WakeOnTraffic(ctx context.Context, id string) (WakeOutcome, error) {
	if !s.store.SandboxPaused(id) {
		return WakeNotPaused, nil
	}
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return 0, err
	}
	if sb.State != sandpit.StatePaused {
		return WakeNotPaused, nil
	}
	if !sb.AutoResume {
		return WakeStaysPaused, nil
	}
	defer s.cluster.specChanged(ctx, id, &err)
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if sb, err = s.store.GetSandbox(ctx, id); err != nil {
		return 0, err
	}
	if sb.State != sandpit.StatePaused {
		return WakeNotPaused, nil
	}
	t0 := time.Now()
	if _, err = s.resumeLocked(ctx, sb); err != nil {
		return 0, err
	}
	s.log.Info("sandbox auto-resumed by traffic", "sandbox", id, "mode", sb.PauseMode, "took", time.Since(t0))
	return WakeResumed, nil
}

// SetTimeout moves a sandbox's end time to now+timeout.
func (s *Service) SetTimeout(ctx context.Context, id string, timeout time.Duration) (_ sandpit.Sandbox, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	if timeout <= 0 || timeout > maxTimeout {
		return sandpit.Sandbox{}, invalidf("timeout must be between 1s and %s", maxTimeout)
	}
	if _, err := s.sandbox(ctx, id); err != nil {
		return sandpit.Sandbox{}, err
	}
	now := s.now()
	if err := s.store.SetSandboxEndAt(ctx, id, now.Add(timeout), now); err != nil {
		return sandpit.Sandbox{}, err
	}
	return s.GetSandbox(ctx, id)
}

// SetLabels replaces a sandbox's labels.
func (s *Service) SetLabels(ctx context.Context, id string, labels map[string]string) (_ sandpit.Sandbox, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	if err := s.validateCreate(&CreateRequest{Labels: labels}); err != nil {
		return sandpit.Sandbox{}, err
	}
	if _, err := s.sandbox(ctx, id); err != nil {
		return sandpit.Sandbox{}, err
	}
	if err := s.store.SetSandboxLabels(ctx, id, nonNil(labels), s.now()); err != nil {
		return sandpit.Sandbox{}, err
	}
	return s.GetSandbox(ctx, id)
}

// Stats samples a running sandbox's resource use.
func (s *Service) Stats(ctx context.Context, id string) (driver.Stats, error) {
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return driver.Stats{}, err
	}
	st, err := s.rt.Stats(ctx, sb.ContainerID)
	if err != nil {
		return st, runtimeErr("stats", err)
	}
	if st.DiskTotal == 0 && s.cfg.DiskWatchMB > 0 {
		// The watcher's limit is the one in force.
		st.DiskTotal = s.cfg.DiskLimitMB(sb.DiskMB) << 20
	}
	return st, nil
}

// SweepExpired acts on every sandbox whose end time has passed: one made
// with on_timeout pause is paused (in its KeepMemory's mode) and kept for
// the paused retention, any other is killed. One sandbox's failure (an
// engine that does not answer) is logged and the sweep goes on to the next.
func (s *Service) SweepExpired(ctx context.Context) (int, error) {
	expired, err := s.store.ListExpiredSandboxes(ctx, s.now())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sb := range expired {
		if sb.State == sandpit.StateCreating {
			continue
		}
		if sb.TimeoutAction() == sandpit.OnTimeoutPause && sb.State != sandpit.StateDeleting {
			if err := s.autoPause(ctx, sb); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
				s.log.Error("sweep: pause expired sandbox", "sandbox", sb.ID, "err", err)
				continue
			}
			n++
			continue
		}
		if err := s.deleteSandbox(ctx, sb.ID, events.Expired); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			s.log.Error("sweep: delete expired sandbox", "sandbox", sb.ID, "err", err)
			continue
		}
		s.log.Info("sandbox expired", "sandbox", sb.ID)
		n++
	}
	return n, nil
}

// PausedRetention is how long a sandbox paused at its deadline is kept
// before the sweeper kills it, as E2B keeps paused sandboxes (up to 30
// days); the E2B facade gives a paused-on-request sandbox the same.
const PausedRetention = maxTimeout

// ReasonTimeout is the state reason of a sandbox paused at its deadline.
const ReasonTimeout = "timeout"

// autoPause pauses a running sandbox at its deadline and moves the deadline
// out by the paused retention. A sandbox that is not running at its deadline
// (paused, with its retention run out; stopped; failed) is killed as any
// expired sandbox is: its pause, if any, already had its retention.
func (s *Service) autoPause(ctx context.Context, sb sandpit.Sandbox) error {
	unlock, err := s.lock(ctx, sb.ID)
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := s.store.GetSandbox(ctx, sb.ID)
	if err != nil {
		return err
	}
	if cur.EndAt.IsZero() || cur.EndAt.After(s.now()) {
		return nil // moved meanwhile (a connect, a set-timeout)
	}
	pausedByThisDeadline := cur.State == sandpit.StatePaused && cur.StateReason == ReasonTimeout && !cur.UpdatedAt.Before(cur.EndAt)
	if cur.State != sandpit.StateRunning && !pausedByThisDeadline {
		if err := s.deleteLocked(ctx, sb.ID, events.Expired); err != nil {
			return err
		}
		s.log.Info("sandbox expired", "sandbox", sb.ID)
		return nil
	}
	if cur.State == sandpit.StateRunning {
		if _, err := s.pauseLocked(ctx, cur, cur.TimeoutPauseMode(), ReasonTimeout); err != nil {
			return err
		}
	}
	// The retention is set after the pause: a daemon that dies between the
	// two leaves a sandbox paused by this deadline (its reason and its
	// change time say so), whose next sweep sets it, rather than a running
	// sandbox with a month to live.
	if err := s.store.SetSandboxEndAt(ctx, sb.ID, s.now().Add(PausedRetention), s.now()); err != nil {
		return err
	}
	s.log.Info("sandbox paused at its deadline", "sandbox", sb.ID, "mode", cur.TimeoutPauseMode())
	return nil
}

// RunSweeper sweeps expired sandboxes, and those due for their lifecycle
// intervals, every interval until ctx ends.
func (s *Service) RunSweeper(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		s.log.Debug("sweep")
		if _, err := s.SweepExpired(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("sweep", "err", err)
		}
		if _, err := s.SweepLifecycle(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("sweep lifecycle", "err", err)
		}
		s.collectForkBases(ctx)
	})
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
