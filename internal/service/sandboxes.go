package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/metrics"
	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/timing"
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
	CPU      float64 // cores; 0 = Config.DefaultCPU
	MemoryMB int64   // 0 = Config.DefaultMemoryMB
	// DiskMB is the sandbox's disk limit in MiB, at most the daemon's
	// --disk-mb; 0 = the daemon's --disk-mb.
	DiskMB int64
	// Timeout sets the sandbox's end time; zero means no deadline.
	Timeout time.Duration
	// Lifecycle intervals in Config.IntervalUnit; nil leaves the default
	// (never stop, never archive, never delete).
	AutoStop    *int
	AutoArchive *int
	AutoDelete  *int
	// User is the account processes and file operations act as when a
	// request names none; empty, or a name the image lacks, means root.
	User string
	// PortAccess says who may reach ports other than the agent's; "" is
	// sandpit.PortAccessExposed. PortAccessToken gets a fresh traffic token.
	PortAccess sandpit.PortAccess
	// Network is the sandbox's own egress policy; zero follows the daemon.
	Network sandpit.NetworkPolicy
	// OnTimeout is what happens at the deadline ("" = kill); a pause keeps
	// memory when KeepMemory is set, else the filesystem. AutoResume wakes
	// a paused sandbox on the first request through the gateway or its
	// preview URL.
	OnTimeout  sandpit.OnTimeout
	KeepMemory bool
	AutoResume bool
	// Volumes are mounted into the sandbox; each names one of the owner's
	// volumes by name or id.
	Volumes []MountRequest

	// recreate makes, under the placement the cluster already holds, a
	// sandbox of a dead node again (failover.go): nothing is reserved, and
	// a failure frees nothing cluster-wide.
	recreate bool
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	idRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	envKey  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	imageRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$`)
)

// Default limits of a sandbox whose create names none.
const (
	DefaultCPU      = 1
	DefaultMemoryMB = 1024
)

// ReservedEnvPrefix starts the environment variables sandpit itself uses
// inside a sandbox (the agent's token, its supervisor marker); a create may
// not set them.
const ReservedEnvPrefix = "SANDPIT_"

// Limits on create input; beyond them the request is refused, not clamped.
const (
	maxCPU      = 64
	maxMemoryMB = 256 * 1024
	maxTimeout  = 30 * 24 * time.Hour
	maxLabels   = 64
	maxEnv      = 256
	// minDiskMB is the smallest disk limit a create may ask for: the
	// agent and a shell's first files fit in it.
	minDiskMB = 16
	// maxInterval bounds a lifecycle interval: 30 days in minutes.
	maxInterval = 30 * 24 * 60
)

// ValidateInterval checks a lifecycle interval's value: auto-delete may be
// AutoDeleteNever (-1); none may be negative otherwise or above 30 days.
func ValidateInterval(which sandpit.Interval, v int) error {
	lo := 0
	if which == sandpit.IntervalAutoDelete {
		lo = sandpit.AutoDeleteNever
	}
	if v < lo || v > maxInterval {
		return invalidf("%s interval must be between %d and %d minutes", which, lo, maxInterval)
	}
	return nil
}

// ResolveImage maps a template or an image to the image to run.
func (s *Service) ResolveImage(image, template string) (string, error) {
	switch {
	case image != "":
		// The engine's own reference grammar decides, so that a reference
		// it would refuse is a 400 here rather than a failed container
		// create (502) later.
		if !imageRE.MatchString(image) {
			return "", invalidf("invalid image reference %q", image)
		}
		if _, err := reference.ParseNormalizedNamed(image); err != nil {
			return "", invalidf("invalid image reference %q: %v", image, err)
		}
		return image, nil
	case template != "":
		if img, ok := s.cfg.Templates[template]; ok {
			return img, nil
		}
		if img, ok := s.late.image(template); ok {
			return img, nil
		}
		if img, ok := s.late.awaited(template); ok {
			if progress, building := s.late.build(img); building {
				// A create waits for it (lateTemplates.await); anything
				// else that needs the image now is told to come back.
				return "", fmt.Errorf("%w: %q: its image %s is being built (%s); the daemon serves it as soon as it exists", sandpit.ErrImageBuilding, template, img, progress)
			}
		}
		if template == interpreterTemplate {
			// The one template a new user asks for by name without making
			// it (the code interpreter SDK's default): say how to get it.
			return "", fmt.Errorf("%w: %q: its image is not built on this machine yet (scripts/build-code-interpreter-image.sh builds it, a few minutes; the daemon serves it as soon as it exists, no restart needed)", sandpit.ErrUnknownTemplate, template)
		}
		if _, ok := s.late.awaited(template); ok {
			return "", fmt.Errorf("%w: %q: its image is not built on this machine yet; the daemon serves it as soon as it exists", sandpit.ErrUnknownTemplate, template)
		}
		return "", fmt.Errorf("%w: %q", sandpit.ErrUnknownTemplate, template)
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
	switch req.OnTimeout {
	case "", sandpit.OnTimeoutKill:
		if req.AutoResume {
			return invalidf("auto-resume needs on_timeout %q", sandpit.OnTimeoutPause)
		}
	case sandpit.OnTimeoutPause:
	default:
		return invalidf("on_timeout must be %q or %q, got %q", sandpit.OnTimeoutKill, sandpit.OnTimeoutPause, req.OnTimeout)
	}
	if req.CPU < 0 || req.CPU > s.cfg.MaxCPU || math.IsNaN(req.CPU) {
		return invalidf("cpu must be between 0 and %g", s.cfg.MaxCPU)
	}
	// One message for every out-of-range memory, low or high, so that -5 and
	// 4 are not told different, contradicting bounds.
	if req.MemoryMB < 0 || req.MemoryMB > s.cfg.MaxMemoryMB || (req.MemoryMB != 0 && req.MemoryMB < 16) {
		if s.cfg.HostMemoryMB > 0 && s.cfg.MaxMemoryMB == s.cfg.HostMemoryMB {
			return invalidf("memory must be 0 (no limit) or between 16 and %d MiB (all the host has), got %d", s.cfg.MaxMemoryMB, req.MemoryMB)
		}
		return invalidf("memory must be 0 (no limit) or between 16 and %d MiB, got %d", s.cfg.MaxMemoryMB, req.MemoryMB)
	}
	switch req.PortAccess {
	case "", sandpit.PortAccessExposed, sandpit.PortAccessPublic, sandpit.PortAccessToken:
	default:
		return invalidf("invalid port access %q", req.PortAccess)
	}
	if err := s.cfg.validateDisk(req.DiskMB); err != nil {
		return err
	}
	for which, v := range map[sandpit.Interval]*int{sandpit.IntervalAutoStop: req.AutoStop, sandpit.IntervalAutoArchive: req.AutoArchive, sandpit.IntervalAutoDelete: req.AutoDelete} {
		if v != nil {
			if err := ValidateInterval(which, *v); err != nil {
				return err
			}
		}
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
	if err := validateEnv(req.Env); err != nil {
		return err
	}
	p, err := s.expandProfiles(req.Network)
	if err != nil {
		return err
	}
	if p, err = NormalizeNetwork(p); err != nil {
		return err
	}
	if err := checkLinkLocal(p); err != nil {
		return err
	}
	if err := s.checkByName(p); err != nil {
		return err
	}
	req.Network = p
	return nil
}

// validateEnv refuses names the engine or the agent would choke on and the
// names sandpit reserves for itself, before anything is made.
func validateEnv(env map[string]string) error {
	for k, v := range env {
		if !envKey.MatchString(k) {
			return invalidf("invalid environment variable name %q", k)
		}
		if strings.HasPrefix(strings.ToUpper(k), ReservedEnvPrefix) {
			return invalidf("environment variable %q: names starting with %s are reserved", k, ReservedEnvPrefix)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return invalidf("environment variable %q: the value contains a NUL byte", k)
		}
	}
	return nil
}

// acquireCreateSlot waits for one of the bounded create slots.
func (s *Service) acquireCreateSlot(ctx context.Context) (release func(), err error) {
	select {
	case s.creates <- struct{}{}:
		return func() { <-s.creates }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a create slot: %w", ctx.Err())
	}
}

// CreateSandbox makes a running sandbox. The row is inserted first, in state
// creating, so the schema rejects a duplicate id or name before any container
// exists; then the container is created and started, the agent is awaited,
// and the row flips to running. Any failure unwinds every step taken, so a
// failed create leaves no container and no row.
func (s *Service) CreateSandbox(ctx context.Context, req CreateRequest) (out sandpit.Sandbox, err error) {
	start := time.Now()
	path := metrics.PathCold
	defer func() {
		s.audit(ctx, "sandbox.create", auditResource(out.ID, req.ID, req.Name), err)
		if err == nil {
			s.cfg.Metrics.CreateDone(path, time.Since(start))
		}
	}()
	if err := s.validateCreate(&req); err != nil {
		return sandpit.Sandbox{}, err
	}
	// An owner's own template (built through any surface) comes before the
	// daemon's; it gives the create its image, its default limits and user,
	// and the start command run below.
	var owned *templates.Resolved
	if req.Image == "" && req.Template != "" {
		if _, daemons := s.cfg.Templates[req.Template]; !daemons {
			rt, found, err := s.tpl.ResolveOwned(ctx, req.Template)
			if err != nil {
				return sandpit.Sandbox{}, err
			}
			if found {
				owned = &rt
				req.Image = rt.Image
				if req.CPU == 0 {
					req.CPU = rt.Template.CPU
				}
				if req.MemoryMB == 0 {
					req.MemoryMB = rt.Template.MemoryMB
				}
				if req.User == "" {
					req.User = rt.Template.User
				}
			}
		}
	}
	if owned == nil && req.Image == "" && req.Template != "" {
		if err := s.late.await(ctx, req.Template); err != nil {
			return sandpit.Sandbox{}, err
		}
	}
	image, err := s.ResolveImage(req.Image, req.Template)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	// The operator's ceilings are checked before anything is made: the
	// owner's per-sandbox caps, the images it may run and the private
	// ranges it may open.
	limits, err := s.store.GetOwnerLimits(ctx, identity.OwnerOf(ctx))
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	if req.recreate {
		// A re-creation makes again what was admitted once, with the
		// resources it had: a cap lowered since must not lose the sandbox.
		limits = sandpit.OwnerLimits{Owner: limits.Owner}
	}
	cpu, memMB, err := s.ownerResources(req, limits)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	if owned == nil {
		if err := s.checkImage(identity.Of(ctx), image); err != nil {
			return sandpit.Sandbox{}, err
		}
	}
	if err := checkEgressGrant(identity.Of(ctx), limits, req.Network); err != nil {
		return sandpit.Sandbox{}, err
	}
	mounts, err := s.mounts.ResolveMounts(ctx, req.Volumes)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	release, err := s.acquireCreateSlot(ctx)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	defer release()
	id := req.ID
	if id == "" {
		id = NewSandboxID()
	}
	access := req.PortAccess
	if access == "" {
		access = sandpit.PortAccessExposed
	}
	trafficToken := ""
	if access == sandpit.PortAccessToken {
		trafficToken = newToken()
	}
	now := s.now()
	sb := sandpit.Sandbox{
		ID:           id,
		Name:         req.Name,
		Image:        image,
		Template:     req.Template,
		State:        sandpit.StateCreating,
		Labels:       nonNil(req.Labels),
		Env:          nonNil(req.Env),
		CPU:          cpu,
		MemoryMB:     memMB,
		Owner:        identity.OwnerOf(ctx),
		ContainerID:  s.sandboxContainerName(id),
		AccessToken:  newToken(),
		Network:      req.Network,
		PortAccess:   access,
		TrafficToken: trafficToken,
		CreatedAt:    now,
		UpdatedAt:    now,
		DiskMB:       s.cfg.DiskLimitMB(req.DiskMB),
		AutoDelete:   sandpit.AutoDeleteNever,
		OnTimeout:    req.OnTimeout,
		KeepMemory:   req.KeepMemory,
		AutoResume:   req.AutoResume,
		Timeout:      req.Timeout.Truncate(time.Second),
		Volumes:      mounts,
	}
	if req.AutoStop != nil {
		sb.AutoStop = *req.AutoStop
	}
	if req.AutoArchive != nil {
		sb.AutoArchive = *req.AutoArchive
	}
	if req.AutoDelete != nil {
		sb.AutoDelete = *req.AutoDelete
	}
	if req.Timeout > 0 {
		sb.EndAt = now.Add(req.Timeout)
	}
	// The id's lock is held for the whole create, so a delete, stop or
	// expose of the same id waits for the create to finish or unwind rather
	// than racing its steps.
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	defer unlock()
	t0 := time.Now()
	if !req.recreate {
		if err := s.cluster.reserve(ctx, sb); err != nil {
			return sandpit.Sandbox{}, err
		}
	}
	if err := s.store.CreateSandboxWithinLimits(ctx, sb, limits, s.cfg.MaxSandboxes); err != nil {
		if !req.recreate {
			s.cluster.release(ctx, id)
		}
		return sandpit.Sandbox{}, err
	}
	timing.Phase(ctx, "store", t0)
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
		// The row was inserted by this call, so every route of this id was
		// installed by this call too: removing them all undoes exactly what
		// it made. A failed row delete leaves the row in creating, which the
		// janitor unwinds.
		s.removeRoutes(rctx, id)
		s.forgetIP(id)
		if err := s.rt.Remove(rctx, sb.ContainerID); err != nil {
			s.log.Error("rollback: remove container", "sandbox", id, "err", err)
		}
		s.removeFirewall(rctx, id)
		// Its row is still creating (becoming running is this call's
		// last step), so nobody heard of it and its removal is not
		// announced either.
		gone := sb
		gone.ID, gone.State = id, sandpit.StateCreating
		if err := s.removeRow(rctx, "", gone); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			s.log.Error("rollback: delete row", "sandbox", id, "err", err)
		}
		if !req.recreate {
			s.cluster.release(rctx, id)
		}
		return sandpit.Sandbox{}, cause
	}

	// A pooled container of the same image, user and runtime becomes the
	// sandbox when the store lets this create adopt one; otherwise it goes
	// cold.
	adopted, err := s.adoptPooled(ctx, &sb, req)
	if err != nil && adopted && ctx.Err() == nil {
		// The pooled container failed us (it died a moment ago, say, or its
		// policy could not be applied): the create goes cold rather than
		// failing, and never answers with a container half made over.
		s.log.Warn("adopting a pooled sandbox failed; creating it cold", "sandbox", id, "err", err)
		err = s.abandonAdoption(ctx, &sb)
		adopted = false
	}
	if err != nil {
		return fail(err)
	}
	if adopted {
		path = metrics.PathWarm
		timing.Describe(ctx, "warm")
		// The refill of the slot this create took starts once the create
		// has answered: its store writes (the new slot's row first) share
		// the one writer connection, and waking it at the adoption put
		// them ahead of this create's own last write.
		defer s.pool.wake()
	} else {
		timing.Describe(ctx, "cold")
		if err := s.createCold(ctx, &sb, req); err != nil {
			return fail(err)
		}
	}
	if owned != nil && (owned.Template.StartCmd != "" || owned.Template.ReadyCmd != "") {
		if err := s.startTemplate(ctx, sb, owned.Template); err != nil {
			return fail(err)
		}
	} else if adopted {
		// An image may declare its own start (the code interpreter's
		// server): a cold container ran it as it started, a pooled one
		// when its slot was filled, so here it is only awaited.
		if err := s.startImage(ctx, sb, true); err != nil {
			return fail(err)
		}
	}
	t0 = time.Now()
	from := sb
	from.State = sandpit.StateCreating
	after, err := s.transition(ctx, change{typ: events.Created, from: from, state: sandpit.StateRunning, then: func() {
		timing.Phase(ctx, "store", t0)
		if !req.recreate {
			s.cluster.publishSpec(ctx, id, &req.User)
		}
	}})
	if err != nil {
		return fail(err)
	}
	after.Volumes = mounts
	return after, nil
}

// containerSpec is the container of sb running image, with the daemon's
// runtime, limits and agent, mounting mounts.
func (s *Service) containerSpec(sb sandpit.Sandbox, image string, mounts []sandpit.VolumeMount) driver.Spec {
	return driver.Spec{
		SandboxID:   sb.ID,
		Name:        sb.ContainerID,
		Image:       image,
		Env:         sb.Env,
		Labels:      s.containerLabels(),
		CPU:         sb.CPU,
		MemoryMB:    sb.MemoryMB,
		DiskMB:      s.cfg.quotaMB(sb),
		Runtime:     s.cfg.Runtime,
		PidsLimit:   s.cfg.PidsLimit,
		AgentBinary: s.cfg.AgentBinary,
		AgentToken:  sb.AccessToken,
		Mounts:      driverMounts(mounts),
		CAFile:      s.cfg.TrustCAFile,
	}
}

// createCold makes and starts a new container for sb.
func (s *Service) createCold(ctx context.Context, sb *sandpit.Sandbox, req CreateRequest) error {
	spec := s.containerSpec(*sb, sb.Image, sb.Volumes)
	spec.AgentUser = req.User
	t0 := time.Now()
	if _, err := s.rt.Create(ctx, spec); err != nil {
		if errors.Is(err, driver.ErrImageNotFound) {
			return fmt.Errorf("%w: %s", sandpit.ErrUnknownImage, sb.Image)
		}
		return runtimeErr("create container", err)
	}
	timing.Phase(ctx, "engine", t0)
	crashpoint.Hit(crashpoint.AfterContainerCreate)
	return s.startAndAwait(ctx, sb, false)
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
		// A row the previous process left says what it did, not what the
		// engine holds: it is checked before the policy reads it.
		if err := s.ensureChecked(ctx, req.ID); err != nil {
			return sandpit.Sandbox{}, false, err
		}
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

// sandboxRoutes lists the routes one sandbox must have towards ip: the
// agent's preview route (E2B clients reach 49983-<id>.<domain>), each exposed
// port and each custom domain.
func (s *Service) sandboxRoutes(ctx context.Context, id, ip string) ([]router.Route, error) {
	routes := []router.Route{{Kind: router.KindHTTP, SandboxID: id, Port: agentapi.Port, Upstream: upstream(ip, agentapi.Port)}}
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	// A host mask (E2B's maskRequestHost) applies to the sandbox's
	// servers, not to its agent.
	mask := sb.Network.MaskRequestHost
	switch sb.PortAccess {
	case sandpit.PortAccessPublic:
		routes = append(routes, router.Route{Kind: router.KindAnyPort, SandboxID: id, Upstream: upstream(ip, 0), AccessToken: sb.AccessToken, Host: mask})
	case sandpit.PortAccessToken:
		routes = append(routes, router.Route{Kind: router.KindAnyPort, SandboxID: id, Upstream: upstream(ip, 0), TrafficToken: sb.TrafficToken, AccessToken: sb.AccessToken, Host: mask})
	}
	ports, err := s.store.ListPorts(ctx, id)
	if err != nil {
		return nil, err
	}
	private, err := s.store.ListPrivatePorts(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, p := range ports {
		r := privateRoute(portRoute(p, ip), private[p.Port])
		if r.Kind == router.KindHTTP {
			r.Host = MaskHost(sb.Network, p.Port)
		}
		routes = append(routes, r)
	}
	domains, err := s.store.ListCustomDomains(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, d := range domains {
		routes = append(routes, privateRoute(domainRoute(d, ip), private[d.Port]))
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
// sandbox's agent, exposed HTTP port or, when all its ports are served
// (E2B creates), any port. It is what Caddy's on-demand TLS asks
// before issuing a certificate. A custom domain must also still pass the
// hostname policy (a name reserved, or taken by an operator's route, after
// it was bound gets no certificate).
func (s *Service) HostnameBound(ctx context.Context, host string) (bool, error) {
	host = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(host)), ".")
	var sb sandpit.Sandbox
	running := func(id string) (bool, error) {
		var err error
		sb, err = s.store.GetSandbox(ctx, id)
		if errors.Is(err, sandpit.ErrNotFound) {
			return false, nil
		}
		return err == nil && sb.State == sandpit.StateRunning, err
	}
	if d, err := s.store.GetCustomDomain(ctx, host); err == nil {
		sb, err := s.store.GetSandbox(ctx, d.SandboxID)
		if errors.Is(err, sandpit.ErrNotFound) {
			return false, nil
		}
		if err != nil || sb.State != sandpit.StateRunning || !s.hostnameConforms(ctx, d, sb.Owner) {
			return false, err
		}
		return true, nil
	} else if !errors.Is(err, sandpit.ErrNotFound) {
		return false, err
	}
	ph := sandpit.ParsePreviewHost(host, s.cfg.Domain)
	if !ph.OK {
		return false, nil
	}
	id, port := ph.SandboxID, ph.Port
	// A paused sandbox's hosts keep their certificate: a request to one
	// wakes a sandbox made with auto-resume, and is told the sandbox is not
	// running otherwise (E2B's 502, which its SDK relies on), neither of
	// which a failed TLS handshake could say.
	if up, err := running(id); err != nil || !up && sb.State != sandpit.StatePaused {
		return false, err
	}
	// The agent's port always has a route; so has every port of a sandbox
	// whose ports are all served (E2B's model: getHost(port) for any port,
	// such as the code interpreter's 49999).
	if port == agentapi.Port || sb.PortAccess == sandpit.PortAccessPublic || sb.PortAccess == sandpit.PortAccessToken {
		return true, nil
	}
	p, err := s.store.GetPort(ctx, id, port)
	if errors.Is(err, sandpit.ErrNotFound) {
		return false, nil
	}
	return err == nil && p.Protocol == ProtoHTTP, err
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
