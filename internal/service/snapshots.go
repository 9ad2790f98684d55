package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// SnapshotRequest asks for a snapshot of a sandbox's filesystem.
type SnapshotRequest struct {
	// ID, when set, is the id to make the snapshot under (a keyed /v1
	// request records it before anything is made); "" picks one.
	ID string
	// Name is unique per owner among templates and snapshots; "" makes an
	// anonymous snapshot. A snapshot of a name that exists is a new build
	// of it, as E2B has it: sandboxes created from the name get the newest.
	Name string
}

// MaxForks bounds one fork request's count.
const MaxForks = 20

// ForkRequest asks for copies of a sandbox.
type ForkRequest struct {
	// Seed, when set, derives the fork's base snapshot id and each copy's
	// id (a keyed /v1 request records it before anything is made), so the
	// retry of a crashed fork adopts what the first attempt made instead of
	// making a second set; "" picks fresh ids.
	Seed string
	// Count is how many copies to make, 1 to MaxForks.
	Count int
	// Timeout is each copy's time to live; 0 keeps the parent's remaining
	// time, or none when the parent has no deadline.
	Timeout time.Duration
	// Name names the copy (only with Count 1, as Daytona's fork has it).
	Name string
}

// ForkResult is one copy's outcome: each copy succeeds or fails on its own.
type ForkResult struct {
	Sandbox sandpit.Sandbox
	Err     error
}

// snapshotState serialises the snapshots of each sandbox so two commits of
// one container never run at once (the engine would freeze it twice).
type snapshotState struct {
	mu  sync.Mutex
	per map[string]*sync.Mutex
}

func (st *snapshotState) lock(id string) func() {
	st.mu.Lock()
	if st.per == nil {
		st.per = map[string]*sync.Mutex{}
	}
	m, ok := st.per[id]
	if !ok {
		m = &sync.Mutex{}
		st.per[id] = m
	}
	st.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// CreateSnapshot commits the sandbox's filesystem as a snapshot: a template
// of kind snapshot whose one build is the committed image. The sandbox keeps
// running (it is frozen only while the engine commits).
func (s *Service) CreateSnapshot(ctx context.Context, sandboxID string, req SnapshotRequest) (_ sandpit.Template, err error) {
	defer func() { s.audit(ctx, "snapshot.create", sandboxID, err) }()
	if req.Name != "" {
		if err := ValidTemplateName(req.Name); err != nil {
			return sandpit.Template{}, err
		}
	}
	sb, err := s.snapshotSource(ctx, sandboxID)
	if err != nil {
		return sandpit.Template{}, err
	}
	t, err := s.snapshot(ctx, sb, TemplateSpec{ID: req.ID, Name: req.Name, Kind: sandpit.KindSnapshot})
	return t, err
}

// snapshotSource finds a sandbox that can be snapshotted: one with a
// container holding its filesystem.
func (s *Service) snapshotSource(ctx context.Context, id string) (sandpit.Sandbox, error) {
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	if s.Archived(sb) {
		return sb, fmt.Errorf("%w: sandbox %s is archived: start it first", ErrNotRunning, id)
	}
	switch sb.State {
	case sandpit.StateRunning, sandpit.StatePaused, sandpit.StateStopped:
		return sb, nil
	}
	return sb, fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, id, sb.State)
}

// snapshot makes (or, for the retry of a request that made it, finds) the
// template and commits sb's container as its new build.
func (s *Service) snapshot(ctx context.Context, sb sandpit.Sandbox, spec TemplateSpec) (sandpit.Template, error) {
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
	defer s.snapshots.lock(sb.ID)()
	def, _ := json.Marshal(map[string]string{"snapshot_of": sb.ID})
	b.State, b.ContentHash, b.Definition = sandpit.BuildBuilding, "snapshot:"+sb.ID, string(def)
	b.CPU, b.MemoryMB = sb.CPU, sb.MemoryMB
	if src, found, err := s.resolveOwnedTemplate(ctx, sb.Template); err == nil && found {
		// A copy of a sandbox made from a template starts the way its
		// template starts it.
		b.StartCmd, b.ReadyCmd, b.Workdir = src.t.StartCmd, src.t.ReadyCmd, src.t.Workdir
	}
	// Its copies act as the account the sandbox acts as, which the row
	// does not record: the container does.
	if c, err := s.rt.Inspect(ctx, sb.ContainerID); err == nil {
		b.User = c.AgentUser
	}
	if err := s.store.StartBuild(ctx, b, s.now()); err != nil {
		_ = s.store.FinishBuild(context.WithoutCancel(ctx), b.ID, sandpit.BuildError, "", "another snapshot of this name was being taken", s.now())
		if errors.Is(err, sandpit.ErrBuildConflict) {
			return sandpit.Template{}, fmt.Errorf("another snapshot named %q is being taken: %w", t.Name, sandpit.ErrBuildConflict)
		}
		return sandpit.Template{}, err
	}
	s.publishBuild(events.BuildStarted, t, b)
	start := time.Now()
	image := s.snapshotImage(t.Owner, b.ID)
	// From here on the commit runs to its end even if the caller hangs
	// up: a half-taken snapshot is worse than a finished one nobody asked
	// for twice.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.BuildTimeout)
	defer cancel()
	labels := s.containerLabels()
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
	if err := s.store.FinishBuild(cctx, b.ID, state, image, reason, s.now()); err != nil {
		return sandpit.Template{}, err
	}
	s.cfg.Metrics.BuildDone(string(state), time.Since(start))
	done, _ := s.store.GetBuild(cctx, b.ID)
	t, err = s.store.GetTemplate(cctx, t.ID)
	if err != nil {
		return sandpit.Template{}, err
	}
	if cerr != nil {
		s.publishBuild(events.BuildError, t, done)
		if outcome == sandpit.Added {
			// A snapshot that never had an image is not left behind.
			_ = s.store.DeleteTemplate(cctx, t.ID)
			_ = s.cluster.forgetTemplate(cctx, t)
		}
		return sandpit.Template{}, runtimeErr("snapshot", cerr)
	}
	s.publishBuild(events.BuildReady, t, done)
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

// Fork snapshots the parent once and makes Count sandboxes from that
// snapshot, each with the parent's files, limits, environment, labels and
// network policy. The parent keeps running. Each copy succeeds or fails on
// its own; the error returned is for the fork as a whole (the parent is
// gone, the count is wrong).
func (s *Service) Fork(ctx context.Context, parentID string, req ForkRequest) (_ []ForkResult, err error) {
	defer func() { s.audit(ctx, "sandbox.fork", parentID, err) }()
	if req.Count < 1 || req.Count > MaxForks {
		return nil, invalidf("count must be between 1 and %d, got %d", MaxForks, req.Count)
	}
	if req.Name != "" && req.Count != 1 {
		return nil, invalidf("a name can be given to a single fork only")
	}
	if req.Timeout < 0 || req.Timeout > maxTimeout {
		return nil, invalidf("timeout must be between 0 and %s", maxTimeout)
	}
	parent, err := s.snapshotSource(ctx, parentID)
	if err != nil {
		return nil, err
	}
	seed := req.Seed
	if seed == "" {
		seed = NewSandboxID()
	}
	ids := make([]string, req.Count)
	for i := range ids {
		sum := sha256.Sum256([]byte(seed + "/" + fmt.Sprint(i)))
		ids[i] = DeriveSandboxID(sum[:])
	}
	base, err := s.snapshot(ctx, parent, TemplateSpec{ID: TemplateIDPrefix + seed, Kind: sandpit.KindFork})
	if err != nil {
		return nil, err
	}
	timeout := req.Timeout
	if timeout == 0 && !parent.EndAt.IsZero() {
		timeout = max(parent.EndAt.Sub(s.now()), time.Minute)
	}
	out := make([]ForkResult, req.Count)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			labels := nonNil(nil)
			for k, v := range parent.Labels {
				labels[k] = v
			}
			sb, _, err := s.CreateOrAdopt(ctx, CreateRequest{
				ID: id, Name: req.Name, Template: base.ID, Env: parent.Env, Labels: labels,
				CPU: parent.CPU, MemoryMB: parent.MemoryMB, DiskMB: parent.DiskMB, Timeout: timeout,
				PortAccess: parent.PortAccess, Network: parent.Network,
			})
			out[i] = ForkResult{Sandbox: sb, Err: err}
		}()
	}
	wg.Wait()
	return out, nil
}

// collectForkBases removes the base snapshot of each fork whose copies are
// all gone: nothing can be created from it, so its image is only disk.
func (s *Service) collectForkBases(ctx context.Context) {
	ts, err := s.store.ListForkBases(ctx)
	if err != nil {
		s.log.Warn("list fork bases", "err", err)
		return
	}
	for _, t := range ts {
		if s.now().Sub(t.CreatedAt) < time.Minute {
			continue // its copies may still be being made
		}
		if t.Image != "" {
			if ids, err := s.store.SandboxesRunning(ctx, t.Image); err != nil || len(ids) > 0 {
				continue
			}
		}
		if err := s.DeleteTemplate(ctx, t.ID); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			s.log.Warn("remove a fork's base snapshot", "template", t.ID, "err", err)
		}
	}
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
