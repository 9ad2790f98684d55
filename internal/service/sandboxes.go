package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
)

// CreateRequest is a validated-on-entry sandbox create.
type CreateRequest struct {
	// ID, when set, is the id to use: the facades derive it from an
	// idempotency claim so that a retry of a crashed attempt reuses it.
	ID       string
	Name     string
	Image    string // wins over Template
	Template string // resolved through Config.Templates
	Env      map[string]string
	Labels   map[string]string
	CPU      float64
	MemoryMB int64
	// Timeout sets the sandbox's end time; zero means no deadline.
	Timeout time.Duration
	// User is the account processes and file operations act as when a
	// request names none; empty, or a name the image lacks, means root.
	User string
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	idRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	envKey  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	imageRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$`)
)

// Limits on create input; beyond them the request is refused, not clamped.
const (
	maxCPU      = 64
	maxMemoryMB = 256 * 1024
	maxTimeout  = 30 * 24 * time.Hour
	maxLabels   = 64
	maxEnv      = 256
)

// ResolveImage maps a template or an image to the image to run.
func (s *Service) ResolveImage(image, template string) (string, error) {
	switch {
	case image != "":
		if !imageRE.MatchString(image) {
			return "", invalidf("invalid image reference %q", image)
		}
		return image, nil
	case template != "":
		if img, ok := s.cfg.Templates[template]; ok {
			return img, nil
		}
		return "", fmt.Errorf("%w: %q", ErrUnknownTemplate, template)
	case s.cfg.DefaultImage != "":
		return s.cfg.DefaultImage, nil
	}
	return "", invalidf("no image given and the daemon has no default image")
}

func (s *Service) validateCreate(req *CreateRequest) error {
	if req.ID != "" && !idRE.MatchString(req.ID) {
		return invalidf("invalid sandbox id %q", req.ID)
	}
	if req.Name != "" && !nameRE.MatchString(req.Name) {
		return invalidf("invalid name %q: use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit", req.Name)
	}
	if req.CPU < 0 || req.CPU > maxCPU {
		return invalidf("cpu must be between 0 and %d", maxCPU)
	}
	if req.MemoryMB < 0 || req.MemoryMB > maxMemoryMB {
		return invalidf("memory must be between 0 and %d MiB", maxMemoryMB)
	}
	if req.MemoryMB != 0 && req.MemoryMB < 16 {
		return invalidf("memory must be at least 16 MiB")
	}
	if req.Timeout < 0 || req.Timeout > maxTimeout {
		return invalidf("timeout must be between 0 and %s", maxTimeout)
	}
	if len(req.Labels) > maxLabels {
		return invalidf("at most %d labels", maxLabels)
	}
	for k, v := range req.Labels {
		if k == "" || len(k) > 128 || len(v) > 1024 {
			return invalidf("label keys must be 1-128 bytes and values at most 1024 bytes")
		}
	}
	if len(req.Env) > maxEnv {
		return invalidf("at most %d environment variables", maxEnv)
	}
	for k := range req.Env {
		if !envKey.MatchString(k) {
			return invalidf("invalid environment variable name %q", k)
		}
	}
	return nil
}

// CreateSandbox makes a running sandbox. The row is inserted first, in state
// creating, so the schema rejects a duplicate id or name before any container
// exists; then the container is created and started, the agent is awaited,
// and the row flips to running. Any failure unwinds every step taken, so a
// failed create leaves no container and no row.
func (s *Service) CreateSandbox(ctx context.Context, req CreateRequest) (out sandpit.Sandbox, err error) {
	defer func() {
		s.audit(ctx, "sandbox.create", auditResource(out.ID, req.ID, req.Name), err)
	}()
	if err := s.validateCreate(&req); err != nil {
		return sandpit.Sandbox{}, err
	}
	image, err := s.ResolveImage(req.Image, req.Template)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	id := req.ID
	if id == "" {
		id = NewSandboxID()
	}
	now := s.now()
	sb := sandpit.Sandbox{
		ID:          id,
		Name:        req.Name,
		Image:       image,
		Template:    req.Template,
		State:       sandpit.StateCreating,
		Labels:      nonNil(req.Labels),
		Env:         nonNil(req.Env),
		CPU:         req.CPU,
		MemoryMB:    req.MemoryMB,
		Owner:       ownerOf(ctx),
		ContainerID: containerName(id),
		AccessToken: newToken(),
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	if req.Timeout > 0 {
		sb.EndAt = now.Add(req.Timeout)
	}
	t0 := time.Now()
	limits, err := s.store.GetOwnerLimits(ctx, sb.Owner)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	if err := s.store.CreateSandboxWithinLimits(ctx, sb, limits); err != nil {
		return sandpit.Sandbox{}, err
	}
	phase(ctx, "store", t0)
	// While the row says creating, a resumed attempt of the same create
	// (CreateOrAdopt) waits for this one instead of failing on the taken id.
	finished := s.trackCreate(id)
	defer finished()
	defer s.pool.enter()()
	// From here on every failure must undo what was made. The rollback runs
	// without the caller's cancellation: a client hanging up mid-create must
	// not leave a half-made sandbox behind.
	fail := func(cause error) (sandpit.Sandbox, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := s.rt.Remove(rctx, sb.ContainerID); err != nil {
			s.log.Error("rollback: remove container", "sandbox", id, "err", err)
		}
		if err := s.store.DeleteSandbox(rctx, id); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			s.log.Error("rollback: delete row", "sandbox", id, "err", err)
		}
		s.forgetIP(id)
		return sandpit.Sandbox{}, cause
	}

	// A pooled container of the same image and user becomes the sandbox
	// when the store lets this create adopt one; otherwise it goes cold.
	adopted, err := s.adoptPooled(ctx, &sb, req)
	if err != nil && adopted && ctx.Err() == nil {
		// The pooled container failed us (it died a moment ago, say): the
		// create goes cold rather than failing.
		s.log.Warn("adopting a pooled sandbox failed; creating it cold", "sandbox", id, "err", err)
		err = s.abandonAdoption(ctx, &sb)
		adopted = false
	}
	if err != nil {
		return fail(err)
	}
	if adopted {
		describe(ctx, "warm")
	} else {
		describe(ctx, "cold")
		if err := s.createCold(ctx, &sb, req); err != nil {
			return fail(err)
		}
	}
	t0 = time.Now()
	if err := s.store.UpdateSandboxState(ctx, id, sandpit.StateRunning, s.now()); err != nil {
		return fail(err)
	}
	phase(ctx, "store", t0)
	sb.State = sandpit.StateRunning
	s.publish(EventCreated, sb, sandpit.StateCreating)
	return sb, nil
}

// createCold makes and starts a new container for sb.
func (s *Service) createCold(ctx context.Context, sb *sandpit.Sandbox, req CreateRequest) error {
	spec := driver.Spec{
		SandboxID:   sb.ID,
		Image:       sb.Image,
		Env:         sb.Env,
		Labels:      s.containerLabels(),
		CPU:         req.CPU,
		MemoryMB:    req.MemoryMB,
		PidsLimit:   s.cfg.PidsLimit,
		AgentBinary: s.cfg.AgentBinary,
		AgentToken:  sb.AccessToken,
		AgentUser:   req.User,
	}
	t0 := time.Now()
	if _, err := s.rt.Create(ctx, spec); err != nil {
		if errors.Is(err, driver.ErrImageNotFound) {
			return fmt.Errorf("%w: %s", ErrUnknownImage, sb.Image)
		}
		return fmt.Errorf("%w: create container: %v", ErrRuntime, err)
	}
	phase(ctx, "engine", t0)
	crashpoint.Hit(crashpoint.AfterContainerCreate)
	return s.startAndAwait(ctx, sb)
}

// ErrCreateInProgress: a resumed create found its sandbox still being created
// by an attempt this process cannot wait for.
var ErrCreateInProgress = errors.New("an earlier attempt at this create is still running")

// CreateOrAdopt is the create of an idempotent attempt, and the one adopt
// policy of every surface. req.ID is the id the attempt recorded in its
// claim before any side effect; a sandbox already under it was made by an
// earlier attempt of the same request (one that crashed, stalled, or answered
// a client that never saw the answer):
//
//   - running, stopped or paused: adopted as it is. It is the sandbox this
//     request made; what happened to it since is its owner's business, and
//     making another would be the duplicate idempotency exists to prevent;
//   - error (its container vanished): removed and made again under the id;
//   - creating: the earlier attempt still runs in this process; wait for it
//     and decide again;
//   - none: made.
//
// adopted reports that the sandbox was not made by this call.
func (s *Service) CreateOrAdopt(ctx context.Context, req CreateRequest) (sandpit.Sandbox, bool, error) {
	if req.ID == "" {
		return sandpit.Sandbox{}, false, invalidf("an idempotent create needs its recorded id")
	}
	const rounds = 4
	for range rounds {
		sb, err := s.store.GetSandbox(ctx, req.ID)
		switch {
		case errors.Is(err, sandpit.ErrNotFound):
			sb, err = s.CreateSandbox(ctx, req)
			if errors.Is(err, sandpit.ErrSandboxExists) {
				continue // another attempt inserted it meanwhile: look again
			}
			return sb, false, err
		case err != nil:
			return sb, false, err
		}
		switch AdoptPolicy(sb.State) {
		case Adopt:
			return sb, true, nil
		case AwaitCreate:
			if err := s.awaitCreate(ctx, req.ID); err != nil {
				return sb, false, err
			}
		case Replace:
			s.log.Warn("removing the leftover of an interrupted create", "sandbox", req.ID, "state", sb.State)
			if err := s.DeleteSandbox(ctx, req.ID); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
				return sb, false, err
			}
		}
	}
	return sandpit.Sandbox{}, false, fmt.Errorf("sandbox %s: %w", req.ID, ErrCreateInProgress)
}

// AdoptAction is what a resumed create does with the sandbox it finds under
// its recorded id.
type AdoptAction int

const (
	// Adopt: answer with the sandbox as it is.
	Adopt AdoptAction = iota + 1
	// Replace: remove the broken leftover and make the sandbox again.
	Replace
	// AwaitCreate: the earlier attempt is still creating it; wait, then
	// decide again.
	AwaitCreate
)

// AdoptPolicy is the one adopt policy of idempotent creates; see
// CreateOrAdopt.
func AdoptPolicy(state sandpit.State) AdoptAction {
	switch state {
	case sandpit.StateRunning, sandpit.StateStopped, sandpit.StatePaused:
		return Adopt
	case sandpit.StateCreating:
		return AwaitCreate
	}
	return Replace
}

// trackCreate marks id as being created by this process until the returned
// function runs.
func (s *Service) trackCreate(id string) func() {
	ch := make(chan struct{})
	s.mu.Lock()
	s.creating[id] = ch
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.creating[id] == ch {
			delete(s.creating, id)
		}
		s.mu.Unlock()
		close(ch)
	}
}

// awaitCreate waits for this process's create of id to end. When none runs
// here (it ended a moment ago, or it runs in another process) it returns at
// once, or ErrCreateInProgress after a short pause if the create still seems
// to be running elsewhere, so the caller looks again without spinning.
func (s *Service) awaitCreate(ctx context.Context, id string) error {
	s.mu.Lock()
	ch, ok := s.creating[id]
	s.mu.Unlock()
	if !ok {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
			return nil
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
		return nil
	}
}

// startAndAwait starts the container, learns its address, waits for the agent
// and (re)installs the sandbox's routes, which point at that address.
func (s *Service) startAndAwait(ctx context.Context, sb *sandpit.Sandbox) error {
	s.forgetIP(sb.ID)
	t0 := time.Now()
	if err := s.rt.Start(ctx, sb.ContainerID); err != nil {
		return fmt.Errorf("%w: start container: %v", ErrRuntime, err)
	}
	c, err := s.rt.Inspect(ctx, sb.ContainerID)
	if err != nil {
		return fmt.Errorf("%w: inspect container: %v", ErrRuntime, err)
	}
	if c.IP == "" {
		return fmt.Errorf("%w: container has no address", ErrRuntime)
	}
	phase(ctx, "engine", t0)
	t0 = time.Now()
	if err := s.waitHealthy(ctx, c.IP); err != nil {
		return err
	}
	// An adopted pooled container's agent starts again with its pool
	// token and no sandbox settings; they are given to it again first.
	if err := s.reinitAdopted(ctx, *sb, c.IP); err != nil {
		return err
	}
	phase(ctx, "agent", t0)
	s.mu.Lock()
	s.ips[sb.ID] = c.IP
	s.mu.Unlock()
	// A route that cannot be installed (another program holds its host
	// port) does not make the sandbox any less started: the failure is
	// logged, the other routes serve, and a retry of that exposure installs
	// it again once the cause is gone.
	if err := s.installRoutes(ctx, sb.ID, c.IP); err != nil {
		s.log.Error("install routes", "sandbox", sb.ID, "err", err)
	}
	return nil
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
	l := maps.Clone(s.cfg.ExtraLabels)
	if l == nil {
		l = map[string]string{}
	}
	if s.cfg.Instance != "" {
		l[driver.LabelInstance] = s.cfg.Instance
	}
	return l
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

// GetSandbox returns a sandbox by id.
func (s *Service) GetSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	return s.sandbox(ctx, id)
}

// GetSandboxByIDOrName resolves an id first, then a name, as Daytona does.
// Names are unique per daemon, but another owner's sandbox found by name is
// not found, like one found by id.
func (s *Service) GetSandboxByIDOrName(ctx context.Context, idOrName string) (sandpit.Sandbox, error) {
	sb, err := s.sandbox(ctx, idOrName)
	if errors.Is(err, sandpit.ErrNotFound) {
		sb, err = s.store.GetSandboxByName(ctx, idOrName)
		if err == nil && !visibleTo(principalOf(ctx), sb) {
			return sandpit.Sandbox{}, fmt.Errorf("get sandbox by name %q: %w", idOrName, sandpit.ErrNotFound)
		}
	}
	return sb, err
}

// ListSandboxes lists the caller's sandboxes (an admin's lists every owner's).
func (s *Service) ListSandboxes(ctx context.Context, opts sandpit.ListOptions) ([]sandpit.Sandbox, string, error) {
	return s.store.ListSandboxes(ctx, scopeList(ctx, opts))
}

// DeleteSandbox removes the container, the routes and the row (its ports and
// domains go with it by cascade).
func (s *Service) DeleteSandbox(ctx context.Context, id string) (err error) {
	defer func() {
		if !errors.Is(err, sandpit.ErrNotFound) {
			s.audit(ctx, "sandbox.delete", id, err)
		}
	}()
	return s.deleteSandbox(ctx, id, EventDeleted)
}

// deleteSandbox deletes and announces the deletion as typ.
func (s *Service) deleteSandbox(ctx context.Context, id string, typ EventType) error {
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return err
	}
	defer s.expectExit(id)()
	defer s.leave(id)()
	if err := s.rt.Remove(ctx, sb.ContainerID); err != nil {
		return fmt.Errorf("%w: remove container: %v", ErrRuntime, err)
	}
	s.forgetIP(id)
	s.removeRoutes(ctx, id)
	if err := s.store.DeleteSandbox(ctx, id); err != nil {
		if errors.Is(err, sandpit.ErrNotFound) {
			return nil // someone else's delete won, and announced it
		}
		return err
	}
	s.publish(typ, sb, sb.State)
	return nil
}

// StopSandbox stops a sandbox's container, keeping its filesystem.
func (s *Service) StopSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	switch sb.State {
	case sandpit.StateStopped:
		return sb, nil
	case sandpit.StateCreating:
		return sb, fmt.Errorf("%w: sandbox %s is still being created", ErrNotRunning, id)
	case sandpit.StatePaused:
		if err := s.rt.Unpause(ctx, sb.ContainerID); err != nil {
			return sb, fmt.Errorf("%w: unpause: %v", ErrRuntime, err)
		}
	}
	defer s.expectExit(id)()
	defer s.leave(id)()
	if err := s.rt.Stop(ctx, sb.ContainerID, 5*time.Second); err != nil {
		return sb, fmt.Errorf("%w: stop container: %v", ErrRuntime, err)
	}
	s.forgetIP(id)
	if err := s.store.UpdateSandboxState(ctx, id, sandpit.StateStopped, s.now()); err != nil {
		return sb, err
	}
	return s.changed(ctx, EventStopped, id, sb.State)
}

// StartSandbox starts a stopped sandbox (or resumes a paused one) and waits
// for its agent.
func (s *Service) StartSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	switch sb.State {
	case sandpit.StateRunning:
		return sb, nil
	case sandpit.StatePaused:
		return s.ResumeSandbox(ctx, id)
	case sandpit.StateCreating:
		return sb, fmt.Errorf("%w: sandbox %s is still being created", ErrNotRunning, id)
	}
	if err := s.startAndAwait(ctx, &sb); err != nil {
		return sb, err
	}
	if err := s.store.UpdateSandboxState(ctx, id, sandpit.StateRunning, s.now()); err != nil {
		return sb, err
	}
	return s.changed(ctx, EventStarted, id, sb.State)
}

// changed reads a sandbox after a state change and announces the change.
func (s *Service) changed(ctx context.Context, typ EventType, id string, old sandpit.State) (sandpit.Sandbox, error) {
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	s.publish(typ, sb, old)
	return sb, nil
}

// PauseSandbox freezes a running sandbox's processes.
func (s *Service) PauseSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	if sb.State != sandpit.StateRunning {
		return sb, fmt.Errorf("%w: sandbox %s is %s", ErrNotRunning, id, sb.State)
	}
	if err := s.rt.Pause(ctx, sb.ContainerID); err != nil {
		return sb, fmt.Errorf("%w: pause: %v", ErrRuntime, err)
	}
	if err := s.store.UpdateSandboxState(ctx, id, sandpit.StatePaused, s.now()); err != nil {
		return sb, err
	}
	sb.State = sandpit.StatePaused
	s.publish(EventPaused, sb, sandpit.StateRunning)
	return sb, nil
}

// ResumeSandbox unfreezes a paused sandbox.
func (s *Service) ResumeSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	if sb.State != sandpit.StatePaused {
		return sb, nil
	}
	if err := s.rt.Unpause(ctx, sb.ContainerID); err != nil {
		return sb, fmt.Errorf("%w: unpause: %v", ErrRuntime, err)
	}
	if err := s.store.UpdateSandboxState(ctx, id, sandpit.StateRunning, s.now()); err != nil {
		return sb, err
	}
	sb.State = sandpit.StateRunning
	s.publish(EventResumed, sb, sandpit.StatePaused)
	// Ports and domains added while the sandbox was paused were only
	// recorded (ExposePort installs routes for running sandboxes), so their
	// routes are installed now; the others are reinstalled, which is a no-op.
	if ip, err := s.sandboxIP(ctx, id); err != nil {
		s.log.Error("resume: install routes", "sandbox", id, "err", err)
	} else if err := s.installRoutes(ctx, id, ip); err != nil {
		s.log.Error("resume: install routes", "sandbox", id, "err", err)
	}
	return sb, nil
}

// SetTimeout moves a sandbox's end time to now+timeout.
func (s *Service) SetTimeout(ctx context.Context, id string, timeout time.Duration) (sandpit.Sandbox, error) {
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
	return s.sandbox(ctx, id)
}

// SetLabels replaces a sandbox's labels.
func (s *Service) SetLabels(ctx context.Context, id string, labels map[string]string) (sandpit.Sandbox, error) {
	if err := s.validateCreate(&CreateRequest{Labels: labels}); err != nil {
		return sandpit.Sandbox{}, err
	}
	if _, err := s.sandbox(ctx, id); err != nil {
		return sandpit.Sandbox{}, err
	}
	if err := s.store.SetSandboxLabels(ctx, id, nonNil(labels), s.now()); err != nil {
		return sandpit.Sandbox{}, err
	}
	return s.sandbox(ctx, id)
}

// Stats samples a running sandbox's resource use.
func (s *Service) Stats(ctx context.Context, id string) (driver.Stats, error) {
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return driver.Stats{}, err
	}
	st, err := s.rt.Stats(ctx, sb.ContainerID)
	if err != nil {
		return st, fmt.Errorf("%w: stats: %v", ErrRuntime, err)
	}
	return st, nil
}

// SweepExpired kills every sandbox whose end time has passed.
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
		if err := s.deleteSandbox(ctx, sb.ID, EventExpired); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			s.log.Error("sweep: delete expired sandbox", "sandbox", sb.ID, "err", err)
			continue
		}
		s.log.Info("sandbox expired", "sandbox", sb.ID)
		n++
	}
	return n, nil
}

// RunSweeper sweeps expired sandboxes every interval until ctx ends.
func (s *Service) RunSweeper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.SweepExpired(ctx); err != nil && ctx.Err() == nil {
				s.log.Error("sweep", "err", err)
			}
		}
	}
}

// expectExit marks id's container as being stopped or removed by the service
// until the returned function runs, so the exit watcher does not mistake it
// for a death.
func (s *Service) expectExit(id string) func() {
	s.mu.Lock()
	s.stopping[id]++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.stopping[id]--; s.stopping[id] <= 0 {
			delete(s.stopping, id)
		}
		s.mu.Unlock()
	}
}

// WatchExits follows the engine's container exits until ctx ends, and marks
// a running sandbox whose container stopped on its own as stopped, announcing
// it as died. A broken event stream is followed again after a pause.
func (s *Service) WatchExits(ctx context.Context) {
	for ctx.Err() == nil {
		exits, err := s.rt.Exits(ctx, s.ownLabels())
		if err != nil {
			s.log.Warn("watch container exits", "err", err)
		} else {
			for id := range exits {
				s.containerExited(ctx, id)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Service) containerExited(ctx context.Context, id string) {
	if id = s.poolExit(ctx, id); id == "" {
		return
	}
	s.mu.Lock()
	expected := s.stopping[id] > 0
	s.mu.Unlock()
	if expected {
		return
	}
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil || sb.State != sandpit.StateRunning {
		// Gone, or stopped, paused or being created by the service: the
		// exit is the service's own doing.
		return
	}
	if c, err := s.rt.Inspect(ctx, sb.ContainerID); err == nil && c.State == "running" {
		return // restarted since
	}
	s.forgetIP(id)
	if err := s.store.UpdateSandboxState(ctx, id, sandpit.StateStopped, s.now()); err != nil {
		s.log.Error("mark died sandbox stopped", "sandbox", id, "err", err)
		return
	}
	s.log.Warn("sandbox container exited on its own", "sandbox", id)
	sb.State = sandpit.StateStopped
	s.publish(EventDied, sb, sandpit.StateRunning)
}

// Reconcile makes the store and the engine agree after a restart: a managed
// container the store does not know is removed; a row left in creating (its
// create died with the previous process) is unwound; a row whose container is
// gone is marked error; a stopped row's running container is stopped. Then
// every durable route is installed again.
func (s *Service) Reconcile(ctx context.Context) error {
	containers, err := s.rt.List(ctx, s.ownLabels())
	if err != nil {
		return fmt.Errorf("%w: list containers: %v", ErrRuntime, err)
	}
	if containers, err = s.reconcilePool(ctx, containers); err != nil {
		return err
	}
	byID := map[string]driver.Container{}
	for _, c := range containers {
		byID[c.SandboxID] = c
	}
	var all []sandpit.Sandbox
	token := ""
	for {
		page, next, err := s.store.ListSandboxes(ctx, sandpit.ListOptions{Limit: 500, PageToken: token})
		if err != nil {
			return err
		}
		all = append(all, page...)
		if next == "" {
			break
		}
		token = next
	}
	known := map[string]bool{}
	for _, sb := range all {
		known[sb.ID] = true
		c, exists := byID[sb.ID]
		switch {
		case sb.State == sandpit.StateCreating:
			s.log.Warn("reconcile: unwinding interrupted create", "sandbox", sb.ID)
			if exists {
				if err := s.rt.Remove(ctx, c.ID); err != nil {
					return fmt.Errorf("%w: remove %s: %v", ErrRuntime, c.ID, err)
				}
			}
			if err := s.store.DeleteSandbox(ctx, sb.ID); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
				return err
			}
		case !exists:
			if sb.State != sandpit.StateError {
				s.log.Warn("reconcile: container gone", "sandbox", sb.ID)
				if err := s.store.UpdateSandboxState(ctx, sb.ID, sandpit.StateError, s.now()); err != nil {
					return err
				}
				old := sb.State
				sb.State = sandpit.StateError
				s.publish(EventDied, sb, old)
			}
		case sb.State == sandpit.StateStopped && c.State == "running":
			if err := s.rt.Stop(ctx, c.ID, 5*time.Second); err != nil {
				return fmt.Errorf("%w: stop %s: %v", ErrRuntime, c.ID, err)
			}
		case sb.State == sandpit.StateRunning && c.State != "running":
			// The engine restarted or the container died: bring it back so
			// the sandbox answers as the store says it does.
			if err := s.startAndAwait(ctx, &sb); err != nil {
				s.log.Error("reconcile: restart sandbox", "sandbox", sb.ID, "err", err)
				_ = s.store.UpdateSandboxState(ctx, sb.ID, sandpit.StateError, s.now())
			}
		case sb.State == sandpit.StatePaused && c.State == "running":
			_ = s.store.UpdateSandboxState(ctx, sb.ID, sandpit.StateRunning, s.now())
		}
	}
	for id, c := range byID {
		if !known[id] {
			s.log.Warn("reconcile: removing orphan container", "container", c.ID, "sandbox", id)
			if err := s.rt.Remove(ctx, c.ID); err != nil {
				return fmt.Errorf("%w: remove orphan %s: %v", ErrRuntime, c.ID, err)
			}
		}
	}
	return s.ReinstallRoutes(ctx)
}

// installRoutes installs every route of one sandbox towards ip.
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

// sandboxRoutes lists the routes one sandbox must have towards ip: the
// agent's preview route (E2B clients reach 49983-<id>.<domain>), each exposed
// port and each custom domain.
func (s *Service) sandboxRoutes(ctx context.Context, id, ip string) ([]router.Route, error) {
	routes := []router.Route{{Kind: router.KindHTTP, SandboxID: id, Port: driver.AgentPort, Upstream: upstream(ip, driver.AgentPort)}}
	ports, err := s.store.ListPorts(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, p := range ports {
		routes = append(routes, portRoute(p, ip))
	}
	domains, err := s.store.ListCustomDomains(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, d := range domains {
		routes = append(routes, domainRoute(d, ip))
	}
	return routes, nil
}

// DesiredRoutes lists every route the store says must be installed now: the
// routes of each running sandbox. A router that lives in another process
// (Caddy) reconciles against it.
func (s *Service) DesiredRoutes(ctx context.Context) ([]router.Route, error) {
	var out []router.Route
	token := ""
	for {
		page, next, err := s.store.ListSandboxes(ctx, sandpit.ListOptions{Limit: 500, PageToken: token, States: []sandpit.State{sandpit.StateRunning}})
		if err != nil {
			return nil, err
		}
		for _, sb := range page {
			ip, err := s.sandboxIP(ctx, sb.ID)
			if err != nil {
				// A sandbox without an address has no route to serve;
				// its routes come back when it is started again.
				s.log.Warn("desired routes: no address", "sandbox", sb.ID, "err", err)
				continue
			}
			routes, err := s.sandboxRoutes(ctx, sb.ID, ip)
			if err != nil {
				return nil, err
			}
			out = append(out, routes...)
		}
		if next == "" {
			return out, nil
		}
		token = next
	}
}

// HostnameBound reports whether a hostname routes to a sandbox right now: a
// custom domain of a running sandbox, or a preview host of a running
// sandbox's agent or exposed HTTP port. It is what Caddy's on-demand TLS asks
// before issuing a certificate.
func (s *Service) HostnameBound(ctx context.Context, host string) (bool, error) {
	host = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(host)), ".")
	running := func(id string) (bool, error) {
		sb, err := s.store.GetSandbox(ctx, id)
		if errors.Is(err, sandpit.ErrNotFound) {
			return false, nil
		}
		return err == nil && sb.State == sandpit.StateRunning, err
	}
	if d, err := s.store.GetCustomDomain(ctx, host); err == nil {
		return running(d.SandboxID)
	} else if !errors.Is(err, sandpit.ErrNotFound) {
		return false, err
	}
	label, ok := strings.CutSuffix(host, "."+s.cfg.Domain)
	if !ok || strings.Contains(label, ".") {
		return false, nil
	}
	id, port, ok := builtin.ParsePreviewLabel(label)
	if !ok {
		return false, nil
	}
	if up, err := running(id); err != nil || !up {
		return false, err
	}
	if port == driver.AgentPort {
		return true, nil
	}
	p, err := s.store.GetPort(ctx, id, port)
	if errors.Is(err, sandpit.ErrNotFound) {
		return false, nil
	}
	return err == nil && p.Protocol == ProtoHTTP, err
}

// removeRoutes removes every route that belongs to a sandbox; failures are
// logged, since the routes point at a container that no longer exists.
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

// ReinstallRoutes installs the routes of every running sandbox; routes are
// durable intent in the store, so a restarted daemon serves them again.
func (s *Service) ReinstallRoutes(ctx context.Context) error {
	token := ""
	for {
		page, next, err := s.store.ListSandboxes(ctx, sandpit.ListOptions{Limit: 500, PageToken: token, States: []sandpit.State{sandpit.StateRunning, sandpit.StatePaused}})
		if err != nil {
			return err
		}
		for _, sb := range page {
			c, err := s.rt.Inspect(ctx, sb.ContainerID)
			if err != nil || c.IP == "" {
				s.log.Error("reinstall routes: no address", "sandbox", sb.ID, "err", err)
				continue
			}
			// A route that cannot be installed is logged, not fatal: a
			// daemon that refused to start because another program took one
			// host port would take every other sandbox's routes down too.
			if err := s.installRoutes(ctx, sb.ID, c.IP); err != nil {
				s.log.Error("reinstall routes", "sandbox", sb.ID, "err", err)
			}
		}
		if next == "" {
			return nil
		}
		token = next
	}
}

// auditResource names a create's sandbox: its id once made, else the name
// it asked for, else the id it would have had.
func auditResource(made, asked, name string) string {
	switch {
	case made != "":
		return made
	case name != "":
		return name
	}
	return asked
}
