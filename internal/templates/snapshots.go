package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// SnapshotSource is what a snapshot takes of the sandbox it copies.
type SnapshotSource struct {
	ID          string
	ContainerID string
	// Template is the template the sandbox was made from: its copies
	// start the way it starts them.
	Template string
	CPU      float64
	MemoryMB int64
	// User is the account the sandbox acts as (read by hold).
	User string
}

// CommitError is a snapshot's commit (or push) the engine failed; the
// sandbox aggregate reports it as the engine's failure.
type CommitError struct{ Err error }

func (e *CommitError) Error() string { return "snapshot: " + e.Err.Error() }
func (e *CommitError) Unwrap() error { return e.Err }

// Snapshot makes (or, for the retry of a request that made it, finds) the
// template of spec and commits the source's container as its new build.
// hold is called once the build exists, before the commit: it takes the
// source's snapshot lock (released when the commit ends) and says which
// account the copies act as.
func (s *Service) Snapshot(ctx context.Context, spec Spec, sb SnapshotSource, hold func() (user string, release func())) (sandpit.Template, error) {
	spec.CPU, spec.MemoryMB, spec.SourceSandbox = sb.CPU, sb.MemoryMB, sb.ID
	t, outcome, err := s.EnsureTemplate(ctx, spec)
	if err != nil {
		return sandpit.Template{}, err
	}
	if t.Kind.Or() != spec.Kind {
		return sandpit.Template{}, fmt.Errorf("%q is a %s template, not a snapshot: %w", t.Name, t.Kind.Or(), sandpit.ErrNameConflict)
	}
	if outcome == sandpit.AlreadyBound && spec.ID != "" && t.ID == spec.ID && t.Image != "" {
		// The retry of a request whose snapshot was made: nothing to redo.
		return t, nil
	}
	b, err := s.NewBuild(ctx, t.ID)
	if err != nil {
		return sandpit.Template{}, err
	}
	user, release := hold()
	defer release()
	def, _ := json.Marshal(map[string]string{"snapshot_of": sb.ID})
	b.State, b.ContentHash, b.Definition = sandpit.BuildBuilding, "snapshot:"+sb.ID, string(def)
	b.CPU, b.MemoryMB = sb.CPU, sb.MemoryMB
	if src, found, err := s.ResolveOwned(ctx, sb.Template); err == nil && found {
		// A copy of a sandbox made from a template starts the way its
		// template starts it.
		b.StartCmd, b.ReadyCmd, b.Workdir = src.Template.StartCmd, src.Template.ReadyCmd, src.Template.Workdir
	}
	b.User = user
	if err := s.transition(ctx, buildChange{t: t, b: b, to: sandpit.BuildBuilding}); err != nil {
		_ = s.transition(context.WithoutCancel(ctx), buildChange{t: t, b: b, to: sandpit.BuildError, reason: "another snapshot of this name was being taken", quiet: true})
		if errors.Is(err, sandpit.ErrBuildConflict) {
			return sandpit.Template{}, fmt.Errorf("another snapshot named %q is being taken: %w", t.Name, sandpit.ErrBuildConflict)
		}
		return sandpit.Template{}, err
	}
	start := time.Now()
	image := s.snapshotImage(t.Owner, b.ID)
	// From here on the commit runs to its end even if the caller hangs
	// up: a half-taken snapshot is worse than a finished one nobody asked
	// for twice.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.BuildTimeout)
	defer cancel()
	labels := s.imageLabels()
	labels[driver.LabelTemplateBuild] = b.ID
	_, cerr := s.cfg.Images.Commit(cctx, sb.ContainerID, image, labels)
	if cerr == nil && s.cfg.Registry != "" {
		cerr = s.cfg.Images.Push(cctx, image, discardLog{})
	}
	crashpoint.Hit(crashpoint.AfterSnapshotCommit)
	state, reason := sandpit.BuildReady, ""
	if cerr != nil {
		state, reason, image = sandpit.BuildError, cerr.Error(), ""
	} else {
		s.cluster.publishTemplate(cctx, t.ID, &readyBuild{image: image, def: BuildDefinition{
			StartCmd: b.StartCmd, ReadyCmd: b.ReadyCmd, User: b.User, Workdir: b.Workdir, CPU: b.CPU, MemoryMB: b.MemoryMB,
		}})
	}
	if err := s.transition(cctx, buildChange{t: t, b: b, to: state, image: image, reason: reason}); err != nil {
		return sandpit.Template{}, err
	}
	s.cfg.Metrics.BuildDone(string(state), time.Since(start))
	t, err = s.store.GetTemplate(cctx, t.ID)
	if err != nil {
		return sandpit.Template{}, err
	}
	if cerr != nil {
		if outcome == sandpit.Added {
			// A snapshot that never had an image is not left behind.
			_ = s.store.DeleteTemplate(cctx, t.ID)
			_ = s.cluster.forgetTemplate(cctx, t)
		}
		return sandpit.Template{}, &CommitError{Err: cerr}
	}
	s.log.Info("snapshot taken", "sandbox", sb.ID, "snapshot", t.ID, "image", image, "took", time.Since(start).Round(time.Millisecond))
	return t, nil
}

type discardLog struct{}

func (discardLog) Write(p []byte) (int, error) { return len(p), nil }

// snapshotImage is the engine's name for one snapshot build's image.
func (s *Service) snapshotImage(owner, buildID string) string {
	o := sha256.Sum256([]byte(owner))
	ref := templateRepo + "/" + hex.EncodeToString(o[:6]) + ":snap-" + strings.TrimPrefix(buildID, "bld")
	if s.cfg.Registry != "" {
		ref = s.cfg.Registry + "/" + ref
	}
	return ref
}

// Snapshots lists the caller's snapshots (an admin's: everyone's), of one
// source sandbox and of one name ("name" or "name:tag") when given.
func (s *Service) Snapshots(ctx context.Context, source, name string) ([]sandpit.Template, error) {
	owner := ""
	if p := identity.Of(ctx); !p.Admin {
		owner = p.Owner
	}
	name, _, _ = strings.Cut(name, ":")
	ts, err := s.store.ListSnapshots(ctx, owner, source, "")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return ts, nil
	}
	kept := ts[:0]
	for _, t := range ts {
		if t.Name == name || t.ID == name {
			kept = append(kept, t)
		}
	}
	return kept, nil
}

// DeleteSnapshot deletes one of the caller's snapshots, refused while a
// sandbox still runs from one of its images: that sandbox would lose what
// it needs to start again.
func (s *Service) DeleteSnapshot(ctx context.Context, id string) error {
	t, err := s.template(ctx, id)
	if err != nil {
		return err
	}
	if t.Kind.Or() != sandpit.KindSnapshot {
		return fmt.Errorf("snapshot %s: %w", id, sandpit.ErrNotFound)
	}
	return s.DeleteTemplate(ctx, t.ID)
}

// snapshotInUse returns ErrSnapshotInUse when a sandbox runs from one of a
// snapshot's images.
func (s *Service) snapshotInUse(ctx context.Context, t sandpit.Template) error {
	if t.Kind.Or() == sandpit.KindBuild {
		return nil
	}
	bs, err := s.store.ListBuilds(ctx, t.ID)
	if err != nil {
		return err
	}
	for _, b := range bs {
		if b.Image == "" {
			continue
		}
		ids, err := s.store.SandboxesRunning(ctx, b.Image)
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			return fmt.Errorf("%w: sandbox %s runs from snapshot %s; delete it first", sandpit.ErrSnapshotInUse, ids[0], t.ID)
		}
	}
	return nil
}

// recoverSnapshot ends a snapshot the previous process left being taken.
// The image the engine may have committed just before the crash is removed,
// and a snapshot that never had an image goes with it: the retry of the
// request makes it again, under the same id when the request was keyed.
func (s *Service) recoverSnapshot(ctx context.Context, t sandpit.Template, b sandpit.TemplateBuild) {
	if s.cfg.Images != nil {
		if err := s.cfg.Images.RemoveImage(ctx, s.snapshotImage(t.Owner, b.ID)); err != nil {
			s.log.Warn("remove the image of an unfinished snapshot", "snapshot", t.ID, "err", err)
		}
	}
	if t.Image == "" {
		if err := s.store.DeleteTemplate(ctx, t.ID); err != nil {
			s.log.Warn("remove an unfinished snapshot", "snapshot", t.ID, "err", err)
		}
		_ = s.cluster.forgetTemplate(ctx, t)
	}
}
