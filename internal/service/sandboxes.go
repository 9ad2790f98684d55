package service

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
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
	for k, v := range req.Env {
		if !envKey.MatchString(k) {
			return invalidf("invalid environment variable name %q", k)
		}
		// The engine refuses a NUL in the environment, which would surface
		// as an engine failure (5xx) rather than the caller's mistake.
		if strings.ContainsRune(v, 0) || len(v) > 128<<10 {
			return invalidf("environment variable %s: values must be at most 128 KiB without NUL bytes", k)
		}
	}
	return nil
}

// CreateSandbox makes a running sandbox. The row is inserted first, in state
// creating, so the schema rejects a duplicate id or name before any container
// exists; then the container is created and started, the agent is awaited,
// and the row flips to running. Any failure unwinds every step taken, so a
// failed create leaves no container and no row.
func (s *Service) CreateSandbox(ctx context.Context, req CreateRequest) (sandpit.Sandbox, error) {
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
		ContainerID: containerName(id),
		AccessToken: newToken(),
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	if req.Timeout > 0 {
		sb.EndAt = now.Add(req.Timeout)
	}
	// The id's lock is held for the whole create, so a delete, stop or
	// expose of the same id waits for the create to finish or unwind rather
	// than racing its steps.
	unlock, err := s.locks.lock(ctx, id)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	defer unlock()
	if err := s.store.CreateSandbox(ctx, sb); err != nil {
		return sandpit.Sandbox{}, err
	}
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
		if err := s.store.DeleteSandbox(rctx, id); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			s.log.Error("rollback: delete row", "sandbox", id, "err", err)
		}
		return sandpit.Sandbox{}, cause
	}

	spec := driver.Spec{
		SandboxID:   id,
		Image:       image,
		Env:         sb.Env,
		Labels:      s.containerLabels(),
		CPU:         req.CPU,
		MemoryMB:    req.MemoryMB,
		PidsLimit:   s.cfg.PidsLimit,
		AgentBinary: s.cfg.AgentBinary,
		AgentToken:  sb.AccessToken,
	}
	if _, err := s.rt.Create(ctx, spec); err != nil {
		if errors.Is(err, driver.ErrImageNotFound) {
			return fail(fmt.Errorf("%w: %s", ErrUnknownImage, image))
		}
		return fail(runtimeErr("create container", err))
	}
	s.Crash(CrashAfterContainerCreate)
	if err := s.startAndAwait(ctx, &sb); err != nil {
		return fail(err)
	}
	if err := s.store.UpdateSandboxState(ctx, id, sandpit.StateRunning, s.now()); err != nil {
		return fail(err)
	}
	sb.State = sandpit.StateRunning
	return sb, nil
}
