package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/events"
)

// ReasonCheckpointFailed is the reason of a memory pause whose checkpoint
// failed after runsc had begun it: the container exited, so the files are
// all that is left, and the sandbox is kept as a filesystem pause.
const ReasonCheckpointFailed = "memory lost: the checkpoint failed"

// ReasonRestoreFailed is the reason of a checkpointed sandbox whose restore
// failed: its checkpoint is dropped and it stays paused as a filesystem
// pause, which the next resume boots anew.
const ReasonRestoreFailed = "memory lost: the restore failed"

// checkpoints is the memory pause that writes a sandbox's processes to disk
// and stops its container (under a runtime that can: driver.Checkpointer),
// and the resume that restores them. It is its own type, not more methods of
// Service, and reaches the sandbox machinery it shares (routes, firewall,
// transitions, the start and agent wait) through svc.
//
// Its state is on disk, not in memory or in the store: a sandbox's
// checkpoint is complete exactly when its directory (dir/<id>) exists under
// its final name; one being written lives in dir/<id>.partial. Reconcile
// and the engine watcher read that to finish or roll back what a killed
// daemon left.
type checkpoints struct {
	svc *Service
	log *slog.Logger
	// ck is nil when the runtime cannot checkpoint: memory pauses freeze.
	ck  driver.Checkpointer
	dir string
}

// enabled reports whether memory pauses checkpoint.
func (c *checkpoints) enabled() bool { return c.ck != nil && c.dir != "" }

// path is where a sandbox's complete checkpoint lives.
func (c *checkpoints) path(id string) string { return filepath.Join(c.dir, id) }

// has reports whether the sandbox has a complete checkpoint.
func (c *checkpoints) has(id string) bool {
	if !c.enabled() {
		return false
	}
	_, err := os.Stat(c.path(id))
	return err == nil
}

// drop removes a sandbox's checkpoint, complete or partial.
func (c *checkpoints) drop(id string) {
	if c.dir == "" {
		return
	}
	for _, p := range []string{c.path(id), c.path(id) + ".partial"} {
		if err := os.RemoveAll(p); err != nil {
			c.log.Warn("remove checkpoint", "sandbox", id, "path", p, "err", err)
		}
	}
}

// clearMarker makes the container's next start boot it, whatever marker a
// killed resume left: a start nobody meant as a restore must not restore.
func (c *checkpoints) clearMarker(containerID string) error {
	if !c.enabled() {
		return nil
	}
	return c.ck.RestoreAtNextStart(containerID, "")
}

// pause is a memory pause that writes the sandbox's processes to disk,
// under its lock, its routes already removed. The steps, each of which a
// killed daemon's restart finishes or rolls back:
//
//  1. runsc writes the checkpoint into a .partial directory, and the
//     container exits; a killed daemon leaves a running row over an
//     exited container and no complete checkpoint: reconcile starts the
//     container again (the sandbox runs, booted anew, with its files);
//  2. the directory gets its final name: from here a killed daemon's
//     restart records the sandbox as paused with its memory;
//  3. the row says paused.
//
// A checkpoint that fails after the container exited is kept as a
// filesystem pause that says so; one that fails with the container still
// running leaves the sandbox running, its routes back.
func (c *checkpoints) pause(ctx context.Context, sb sandpit.Sandbox, reason string) (sandpit.Sandbox, error) {
	s := c.svc
	id := sb.ID
	// The daemon's kept-alive connections to the agent go first: the
	// sandbox is not reached again until it is restored.
	s.forgetIP(id)
	leave := s.leave(id)
	defer leave()
	final := c.path(id)
	partial := final + ".partial"
	c.drop(id)
	if err := os.MkdirAll(partial, 0o700); err != nil {
		s.restoreRoutes(ctx, id)
		return sb, fmt.Errorf("checkpoint directory: %w", err)
	}
	t0 := time.Now()
	if err := c.ck.Checkpoint(ctx, sb.ContainerID, partial); err != nil {
		c.drop(id)
		if ci, ierr := s.rt.Inspect(context.WithoutCancel(ctx), sb.ContainerID); ierr == nil && ci.State == "running" {
			// runsc did not end the sandbox: it runs on untouched.
			s.restoreRoutes(ctx, id)
			return sb, runtimeErr("checkpoint", err)
		}
		c.log.Error("checkpoint failed; the sandbox is kept as a filesystem pause", "sandbox", id, "err", err)
		s.removeFirewall(ctx, id)
		return s.transition(ctx, change{typ: events.Paused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseFilesystem, reason: ReasonCheckpointFailed, reread: true})
	}
	crashpoint.Hit(crashpoint.AfterCheckpointWrite)
	if err := os.Rename(partial, final); err != nil {
		c.drop(id)
		s.removeFirewall(ctx, id)
		c.log.Error("keep checkpoint; the sandbox is kept as a filesystem pause", "sandbox", id, "err", err)
		return s.transition(ctx, change{typ: events.Paused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseFilesystem, reason: ReasonCheckpointFailed, reread: true})
	}
	s.removeFirewall(ctx, id)
	c.log.Info("sandbox checkpointed", "sandbox", id, "took", time.Since(t0), "bytes", dirSize(final))
	crashpoint.Hit(crashpoint.AfterCheckpoint)
	return s.transition(ctx, change{typ: events.Paused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseMemory, reason: reason, reread: true})
}

// resume resumes a checkpointed sandbox: the container's next start
// restores the checkpoint, the agent (restored, not started again) is
// awaited, routes go back, the row says running, and the checkpoint goes.
// A killed daemon between the start and the row leaves a paused row over a
// running container, which reconcile records as resumed (and drops the
// checkpoint). A restore that fails drops the checkpoint and keeps the
// sandbox as a filesystem pause, whose next resume boots it anew: a
// checkpoint that cannot be restored must not make it unresumable.
func (c *checkpoints) resume(ctx context.Context, sb sandpit.Sandbox) (sandpit.Sandbox, error) {
	s := c.svc
	id := sb.ID
	if err := c.ck.RestoreAtNextStart(sb.ContainerID, c.path(id)); err != nil {
		return sb, runtimeErr("restore marker", err)
	}
	t0 := time.Now()
	if err := s.startAndAwait(ctx, &sb, true); err != nil {
		if cerr := c.clearMarker(sb.ContainerID); cerr != nil {
			c.log.Warn("clear restore marker", "sandbox", id, "err", cerr)
		}
		if ctx.Err() != nil {
			return sb, err
		}
		c.log.Error("restore failed; the checkpoint is dropped and the sandbox kept as a filesystem pause", "sandbox", id, "err", err)
		c.drop(id)
		if _, terr := s.transition(ctx, change{typ: events.Paused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseFilesystem, reason: ReasonRestoreFailed, reread: true}); terr != nil && !errors.Is(terr, errReread) {
			c.log.Error("record failed restore", "sandbox", id, "err", terr)
		}
		return sb, err
	}
	c.log.Info("sandbox restored from its checkpoint", "sandbox", id, "took", time.Since(t0))
	crashpoint.Hit(crashpoint.AfterResumeStart)
	after, err := s.transition(ctx, change{typ: events.Resumed, from: sb, state: sandpit.StateRunning, reread: true})
	if err != nil && !errors.Is(err, errReread) {
		s.undoStart(ctx, &sb)
		return sb, err
	}
	c.drop(id)
	return after, err
}

// dirSize is the total size of the files under dir (a checkpoint's, for
// the log and the benchmark).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
