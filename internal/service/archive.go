package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/events"
)

// ReasonArchived is the state reason of a stopped sandbox whose container
// was removed after its filesystem was committed to its archive image.
const ReasonArchived = "archived"

// labelArchive marks an archive image with its sandbox's id.
const labelArchive = "sandpit.archive"

// archived reports whether a sandbox is archived: stopped, its container
// removed, its files in its archive image.
func archived(sb sandpit.Sandbox) bool {
	return sb.State == sandpit.StateStopped && sb.StateReason == ReasonArchived && sb.ArchiveImage != ""
}

// Archived reports whether Daytona shows a sandbox as archived: one whose
// filesystem is in its archive image.
func (s *Service) Archived(sb sandpit.Sandbox) bool { return archived(sb) }

// archiveRef is the image an archive of sandbox id is committed to. Two
// tags take turns, so that a new archive never overwrites the image the
// sandbox's current container was restored from, which goes once the new
// one is recorded.
func archiveRef(id, previous string) string {
	tag := "a"
	if strings.HasSuffix(previous, ":a") {
		tag = "b"
	}
	return "sandpit-archive/" + id + ":" + tag
}

// ArchiveSandbox archives a sandbox, Daytona's archive: a running one is
// stopped first, then its filesystem is committed to an image, the image is
// recorded and the container removed. Start restores it from the image.
// Archiving an archived sandbox is a no-op.
//
// Each step is recorded before the next begins, so a daemon that dies
// midway leaves a state its restart finishes or rolls back: after the
// commit and before the record, a stopped sandbox with its container (a
// retry archives again); after the record and before the removal, an
// archived row whose container reconcile removes.
func (s *Service) ArchiveSandbox(ctx context.Context, id string) (_ sandpit.Sandbox, err error) {
	defer s.cluster.specChanged(ctx, id, &err)
	if s.cfg.Images == nil {
		return sandpit.Sandbox{}, fmt.Errorf("%w: archive needs an engine that commits images", sandpit.ErrInvalid)
	}
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return sb, err
	}
	defer unlock()
	if archived(sb) {
		return sb, nil
	}
	if _, err := s.store.GetPoolSlotOf(ctx, id); err == nil {
		// An adopted pooled container carries its slot's settings, which a
		// container restored from an image would not.
		return sb, invalidf("sandbox %s came from the warm pool and cannot be archived", id)
	} else if !errors.Is(err, sandpit.ErrNotFound) {
		return sb, err
	}
	switch sb.State {
	case sandpit.StateRunning, sandpit.StatePaused:
		if sb, err = s.stopLocked(ctx, sb); err != nil {
			return sb, err
		}
	case sandpit.StateStopped:
	default:
		return sb, fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, id, sb.State)
	}
	previous := sb.ArchiveImage
	ref := archiveRef(id, previous)
	// An image already under ref is no container's (the current one is
	// built on previous, the other tag): an archive that died after its
	// commit left it. It goes first, so that the commit does not leave it
	// behind untagged.
	s.removeArchiveImage(ctx, ref)
	labels := map[string]string{labelArchive: id}
	for k, v := range s.ownLabels() {
		labels[k] = v
	}
	if _, err := s.cfg.Images.Commit(ctx, sb.ContainerID, ref, labels); err != nil {
		return sb, runtimeErr("commit container", err)
	}
	crashpoint.Hit(crashpoint.AfterArchiveCommit)
	if err := s.store.SetSandboxArchiveImage(ctx, id, ref, s.now()); err != nil {
		return sb, err
	}
	sb.ArchiveImage = ref
	after, err := s.transition(ctx, change{typ: events.Archived, from: sb, state: sandpit.StateStopped, reason: ReasonArchived, reread: true})
	if err != nil {
		return after, err
	}
	if err := s.rt.Remove(ctx, sb.ContainerID); err != nil {
		// The archive is recorded: reconcile or the next archive removes
		// the container.
		s.log.Error("archive: remove container", "sandbox", id, "err", err)
	}
	if previous != "" && previous != ref {
		s.removeArchiveImage(ctx, previous)
	}
	return after, nil
}

// restoreArchived makes an archived sandbox's container again from its
// archive image; the caller starts it. The image stays while the container
// is built on it: it goes with the sandbox, or with the next archive.
func (s *Service) restoreArchived(ctx context.Context, sb sandpit.Sandbox) error {
	// A container left by a restore that died before its state change is
	// replaced.
	if err := s.rt.Remove(ctx, sb.ContainerID); err != nil {
		return runtimeErr("remove container", err)
	}
	// The volumes the sandbox mounts are not in the archive: the new
	// container mounts them again.
	mounts, err := s.store.SandboxMounts(ctx, sb.ID)
	if err != nil {
		return err
	}
	// The agent's user is in the image's environment: the commit kept
	// the container's.
	spec := s.containerSpec(sb, sb.ArchiveImage, mounts)
	if _, err := s.rt.Create(ctx, spec); err != nil {
		return runtimeErr("create container from archive", err)
	}
	return nil
}

// removeArchiveImages removes both archive tags of a deleted sandbox: the
// current one and any an interrupted archive left.
func (s *Service) removeArchiveImages(ctx context.Context, id string) {
	if s.cfg.Images == nil {
		return
	}
	for _, ref := range []string{archiveRef(id, ":b"), archiveRef(id, ":a")} {
		if ok, err := s.cfg.Images.HasImage(ctx, ref); err == nil && ok {
			s.removeArchiveImage(ctx, ref)
		}
	}
}

// removeArchiveImage removes an archive image no container is built on;
// a failure leaves the image behind and is logged.
func (s *Service) removeArchiveImage(ctx context.Context, ref string) {
	if s.cfg.Images == nil || ref == "" {
		return
	}
	if err := s.cfg.Images.RemoveImage(context.WithoutCancel(ctx), ref); err != nil {
		s.log.Warn("remove archive image", "image", ref, "err", err)
	}
}
