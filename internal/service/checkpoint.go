package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/crashpoint"
)

// ReasonCheckpointFailed is the reason of a memory pause whose checkpoint
// failed after runsc had begun it: runsc ends the sandbox either way, so the
// files are all that is left, and the sandbox is kept as a filesystem pause.
const ReasonCheckpointFailed = "memory lost: the checkpoint failed"

// ReasonRestoreFailed is the reason of a checkpointed sandbox whose restore
// failed: its checkpoint is dropped and it stays paused as a filesystem
// pause, which the next resume boots anew.
const ReasonRestoreFailed = "memory lost: the restore failed"

// defaultCheckpointQuiesce bounds the wait for a sandbox's connections to
// close before its checkpoint: gVisor keeps a connection its side closed
// first in TIME_WAIT for 60 seconds, and refuses to save it meanwhile.
const defaultCheckpointQuiesce = 65 * time.Second

// PauseKind says what a memory pause does under this daemon's runtime:
// "checkpoint" (the processes are written to disk and the container stops)
// or "freezer" (they are frozen in place and keep their memory).
func (s *Service) PauseKind() string {
	if s.cfg.Checkpoints != nil {
		return "checkpoint"
	}
	return "freezer"
}

// checkpointDir is where a sandbox's checkpoint lives once complete; a
// checkpoint being written lives beside it, in checkpointDir + ".partial",
// so a complete checkpoint is exactly one whose directory has its final
// name.
func (s *Service) checkpointDir(id string) string {
	return filepath.Join(s.cfg.CheckpointDir, id)
}

// checkpointed reports whether the sandbox has a complete checkpoint.
func (s *Service) checkpointed(id string) bool {
	if s.cfg.Checkpoints == nil || s.cfg.CheckpointDir == "" {
		return false
	}
	_, err := os.Stat(s.checkpointDir(id))
	return err == nil
}

// dropCheckpoint removes a sandbox's checkpoint, complete or partial.
func (s *Service) dropCheckpoint(id string) {
	if s.cfg.CheckpointDir == "" {
		return
	}
	for _, p := range []string{s.checkpointDir(id), s.checkpointDir(id) + ".partial"} {
		if err := os.RemoveAll(p); err != nil {
			s.log.Warn("remove checkpoint", "sandbox", id, "path", p, "err", err)
		}
	}
}

// quiesce waits until the sandbox has no connection a checkpoint cannot
// save, and reports the ones left when the wait ends without that. The
// daemon's own kept-alive connections to the agent were closed by the
// caller (forgetIP): the daemon closes them first, so the sandbox's side
// closes at once instead of waiting out TIME_WAIT.
func (s *Service) quiesce(ctx context.Context, sb sandpit.Sandbox) ([]string, error) {
	limit := s.cfg.CheckpointQuiesce
	if limit <= 0 {
		limit = defaultCheckpointQuiesce
	}
	deadline := time.Now().Add(limit)
	for {
		left, err := s.cfg.Checkpoints.Unsaveable(ctx, sb.ContainerID)
		if err != nil || len(left) == 0 || time.Now().After(deadline) {
			return left, err
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// pauseCheckpoint is a memory pause that writes the sandbox's processes to
// disk, under its lock, its routes already removed. The steps, each of
// which a killed daemon's restart finishes or rolls back (reconcile and
// watchContainer read the checkpoint's directory):
//
//  1. wait for connections runsc cannot save to close; when some stay
//     open, the pause freezes the processes instead, as under runc;
//  2. runsc writes the checkpoint into a .partial directory, and the
//     container exits; a killed daemon leaves a running row over an
//     exited container and no complete checkpoint: the container is
//     started again (the sandbox runs, booted anew, with its files);
//  3. the directory gets its final name: from here a killed daemon's
//     restart records the sandbox as paused with its memory;
//  4. the row says paused.
//
// A checkpoint that fails ends the sandbox's processes all the same (runsc
// does), and the sandbox is kept as a filesystem pause that says so.
func (s *Service) pauseCheckpoint(ctx context.Context, sb sandpit.Sandbox, reason string) (sandpit.Sandbox, error) {
	id := sb.ID
	s.forgetIP(id)
	leave := s.leave(id)
	defer leave()
	left, err := s.quiesce(ctx, sb)
	if err != nil {
		s.restoreRoutes(ctx, id)
		return sb, runtimeErr("read the sandbox's connections", err)
	}
	if len(left) > 0 {
		s.log.Warn("checkpoint not possible: connections stay open; the memory pause freezes the processes instead",
			"sandbox", id, "connections", strings.Join(left, ", "))
		if err := s.rt.Pause(ctx, sb.ContainerID); err != nil {
			s.restoreRoutes(ctx, id)
			return sb, runtimeErr("pause", err)
		}
		return s.transition(ctx, change{typ: EventPaused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseMemory, reason: reason, reread: true})
	}
	final := s.checkpointDir(id)
	partial := final + ".partial"
	s.dropCheckpoint(id)
	if err := os.MkdirAll(partial, 0o700); err != nil {
		s.restoreRoutes(ctx, id)
		return sb, fmt.Errorf("checkpoint directory: %w", err)
	}
	t0 := time.Now()
	if err := s.cfg.Checkpoints.Checkpoint(ctx, sb.ContainerID, partial); err != nil {
		s.dropCheckpoint(id)
		if c, ierr := s.rt.Inspect(context.WithoutCancel(ctx), sb.ContainerID); ierr == nil && c.State == "running" {
			// runsc never began: the sandbox runs on untouched.
			s.restoreRoutes(ctx, id)
			return sb, runtimeErr("checkpoint", err)
		}
		s.log.Error("checkpoint failed; the sandbox is kept as a filesystem pause", "sandbox", id, "err", err)
		s.removeFirewall(ctx, id)
		return s.transition(ctx, change{typ: EventPaused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseFilesystem, reason: ReasonCheckpointFailed, reread: true})
	}
	crashpoint.Hit(crashpoint.AfterCheckpointWrite)
	if err := os.Rename(partial, final); err != nil {
		s.dropCheckpoint(id)
		s.removeFirewall(ctx, id)
		s.log.Error("keep checkpoint; the sandbox is kept as a filesystem pause", "sandbox", id, "err", err)
		return s.transition(ctx, change{typ: EventPaused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseFilesystem, reason: ReasonCheckpointFailed, reread: true})
	}
	s.removeFirewall(ctx, id)
	s.log.Info("sandbox checkpointed", "sandbox", id, "took", time.Since(t0), "bytes", dirSize(final))
	crashpoint.Hit(crashpoint.AfterCheckpoint)
	return s.transition(ctx, change{typ: EventPaused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseMemory, reason: reason, reread: true})
}

// resumeRestore resumes a checkpointed sandbox: the container's next start
// restores the checkpoint, the agent (restored, not started again) is
// awaited, routes go back, the row says running, and the checkpoint goes.
// A killed daemon between the start and the row leaves a paused row over
// a running container, which reconcile records as resumed (and drops the
// checkpoint). A restore that fails drops the checkpoint and keeps the
// sandbox as a filesystem pause, whose next resume boots it anew: a
// checkpoint that cannot be restored must not make it unresumable.
func (s *Service) resumeRestore(ctx context.Context, sb sandpit.Sandbox) (sandpit.Sandbox, error) {
	id := sb.ID
	if err := s.cfg.Checkpoints.RestoreAtNextStart(sb.ContainerID, s.checkpointDir(id)); err != nil {
		return sb, runtimeErr("restore marker", err)
	}
	t0 := time.Now()
	if err := s.startAwait(ctx, &sb, true); err != nil {
		if cerr := s.cfg.Checkpoints.RestoreAtNextStart(sb.ContainerID, ""); cerr != nil {
			s.log.Warn("clear restore marker", "sandbox", id, "err", cerr)
		}
		if ctx.Err() != nil {
			return sb, err
		}
		s.log.Error("restore failed; the checkpoint is dropped and the sandbox kept as a filesystem pause", "sandbox", id, "err", err)
		s.dropCheckpoint(id)
		if _, terr := s.transition(ctx, change{typ: EventPaused, from: sb, state: sandpit.StatePaused, mode: sandpit.PauseFilesystem, reason: ReasonRestoreFailed, reread: true}); terr != nil && !errors.Is(terr, errReread) {
			s.log.Error("record failed restore", "sandbox", id, "err", terr)
		}
		return sb, err
	}
	s.log.Info("sandbox restored from its checkpoint", "sandbox", id, "took", time.Since(t0))
	crashpoint.Hit(crashpoint.AfterResumeStart)
	after, err := s.transition(ctx, change{typ: EventResumed, from: sb, state: sandpit.StateRunning, reread: true})
	if err != nil && !errors.Is(err, errReread) {
		s.undoStart(ctx, &sb)
		return sb, err
	}
	s.dropCheckpoint(id)
	return after, err
}

// dirSize is the total size of the files under dir, for the log.
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
