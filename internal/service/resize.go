package service

import (
	"context"
	"fmt"
	"math"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/crashpoint"
	"github.com/sandpit-dev/sandpit/internal/driver"
)

// Resize is a change of a sandbox's resources; a zero field keeps what the
// sandbox has.
type Resize struct {
	CPU      float64
	MemoryMB int64
}

// ResizeSandbox changes a sandbox's cpu and memory limits, as `docker
// update --cpus --memory` does: at once when its container exists (running,
// paused or stopped), and for every later start. The new figures are checked
// like a create's: the daemon's maxima, the owner's per-sandbox caps and the
// owner's totals. Asking for what the sandbox has changes nothing, so a
// retried resize is harmless.
func (s *Service) ResizeSandbox(ctx context.Context, id string, r Resize) (_ sandpit.Sandbox, err error) {
	if r.CPU < 0 || r.CPU > s.cfg.MaxCPU || math.IsNaN(r.CPU) {
		return sandpit.Sandbox{}, invalidf("cpu must be between 0 (unchanged) and %g, got %g", s.cfg.MaxCPU, r.CPU)
	}
	if r.MemoryMB < 0 || r.MemoryMB > s.cfg.MaxMemoryMB || (r.MemoryMB != 0 && r.MemoryMB < 16) {
		return sandpit.Sandbox{}, invalidf("memory must be 0 (unchanged) or between 16 and %d MiB, got %d", s.cfg.MaxMemoryMB, r.MemoryMB)
	}
	if r.CPU == 0 && r.MemoryMB == 0 {
		return sandpit.Sandbox{}, invalidf("give cpu or memory to change")
	}
	if _, err := s.sandbox(ctx, id); err != nil {
		return sandpit.Sandbox{}, err
	}
	defer s.cluster.specChanged(ctx, id, &err)
	// The lock keeps a start, stop or pause from racing the engine update.
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	defer unlock()
	sb, err := s.sandbox(ctx, id)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	cpu, mem := sb.CPU, sb.MemoryMB
	if r.CPU != 0 {
		cpu = r.CPU
	}
	if r.MemoryMB != 0 {
		mem = r.MemoryMB
	}
	if cpu == sb.CPU && mem == sb.MemoryMB {
		return sb, nil
	}
	limits, err := s.store.GetOwnerLimits(ctx, sb.Owner)
	if err != nil {
		return sandpit.Sandbox{}, err
	}
	switch {
	case limits.MaxSandboxCPU > 0 && cpu > limits.MaxSandboxCPU:
		return sandpit.Sandbox{}, invalidf("cpu %g exceeds owner %q's per-sandbox limit of %g (max_sandbox_cpu)", cpu, sb.Owner, limits.MaxSandboxCPU)
	case limits.MaxSandboxMemoryMB > 0 && mem > limits.MaxSandboxMemoryMB:
		return sandpit.Sandbox{}, invalidf("memory %d MiB exceeds owner %q's per-sandbox limit of %d MiB (max_sandbox_memory_mb)", mem, sb.Owner, limits.MaxSandboxMemoryMB)
	case sb.State == sandpit.StateCreating:
		return sandpit.Sandbox{}, fmt.Errorf("sandbox %s is still being created: %w", id, ErrCreateInProgress)
	}
	defer func() { s.audit(ctx, "sandbox.resize", id, err) }()
	// The store first: it checks the owner's totals, so a refused resize
	// never reaches the engine. If the engine then refuses (a memory limit
	// below what the container uses), the row is put back.
	if err := s.store.ResizeSandbox(ctx, id, cpu, mem, limits, s.now()); err != nil {
		return sandpit.Sandbox{}, err
	}
	// A daemon that dies here leaves the row ahead of the engine; the
	// restart's check and every start apply the row (syncLimits).
	crashpoint.Hit(crashpoint.AfterResizeStore)
	if sb.ContainerID != "" {
		if err := s.rt.Update(ctx, sb.ContainerID, cpu, mem); err != nil {
			if rerr := s.store.ResizeSandbox(context.WithoutCancel(ctx), id, sb.CPU, sb.MemoryMB, sandpit.OwnerLimits{}, s.now()); rerr != nil {
				s.log.Error("put back a sandbox's resources after the engine refused them", "sandbox", id, "err", rerr)
			}
			return sandpit.Sandbox{}, fmt.Errorf("resize sandbox %s: %w", id, err)
		}
	}
	return s.GetSandbox(ctx, id)
}

// syncLimits gives a container the cpu and memory limits its row holds when
// the engine reports others: a resize stores the new figures before it
// updates the engine, and a daemon killed in between leaves the two apart.
// A container from the engine's list carries no limits: it is inspected.
func (s *Service) syncLimits(ctx context.Context, sb sandpit.Sandbox, c driver.Container) error {
	if !c.Limits {
		var err error
		if c, err = s.rt.Inspect(ctx, c.ID); err != nil {
			return err
		}
	}
	if !c.Limits || (c.CPU == sb.CPU && c.MemoryMB == sb.MemoryMB) {
		return nil
	}
	s.log.Info("sandbox limits differ from the engine's: applying the stored ones", "sandbox", sb.ID,
		"cpu", sb.CPU, "memory_mb", sb.MemoryMB, "engine_cpu", c.CPU, "engine_memory_mb", c.MemoryMB)
	return s.rt.Update(ctx, c.ID, sb.CPU, sb.MemoryMB)
}
