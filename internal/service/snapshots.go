package service

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/templates"
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
		if err := templates.ValidName(req.Name); err != nil {
			return sandpit.Template{}, err
		}
	}
	sb, err := s.snapshotSource(ctx, sandboxID)
	if err != nil {
		return sandpit.Template{}, err
	}
	t, err := s.snapshot(ctx, sb, templates.Spec{ID: req.ID, Name: req.Name, Kind: sandpit.KindSnapshot})
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
// template and commits sb's container as its new build. The commit is the
// template aggregate's; what it needs of the sandbox (its container, the
// account it acts as) is read here, and the sandbox's snapshots are taken
// one at a time.
func (s *Service) snapshot(ctx context.Context, sb sandpit.Sandbox, spec templates.Spec) (sandpit.Template, error) {
	src := templates.SnapshotSource{ID: sb.ID, ContainerID: sb.ContainerID, Template: sb.Template, CPU: sb.CPU, MemoryMB: sb.MemoryMB}
	t, err := s.tpl.Snapshot(ctx, spec, src, func() (user string, release func()) {
		release = s.snapshots.lock(sb.ID)
		// Its copies act as the account the sandbox acts as, which the
		// row does not record: the container does.
		if c, err := s.rt.Inspect(ctx, sb.ContainerID); err == nil {
			user = c.AgentUser
		}
		return user, release
	})
	if ce := (*templates.CommitError)(nil); errors.As(err, &ce) {
		return t, runtimeErr("snapshot", ce.Err)
	}
	return t, err
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
	base, err := s.snapshot(ctx, parent, templates.Spec{ID: templates.IDPrefix + seed, Kind: sandpit.KindFork})
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
		if err := s.tpl.DeleteTemplate(ctx, t.ID); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			s.log.Warn("remove a fork's base snapshot", "template", t.ID, "err", err)
		}
	}
}
