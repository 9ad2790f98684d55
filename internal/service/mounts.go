package service

import (
	"context"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/volumes"
)

// MountRequest is one volume a create asks to mount (see volumes).
type MountRequest = volumes.MountRequest

// Mounter is what a sandbox create needs of the volumes aggregate: the
// caller's volume references resolved to the mounts the container gets,
// checked before any row or container is made. *volumes.Service implements
// it.
type Mounter interface {
	ResolveMounts(ctx context.Context, reqs []MountRequest) ([]sandpit.VolumeMount, error)
}

// Volumes returns the volumes aggregate, which the facades serve volumes
// from and the daemon reconciles at start.
func (s *Service) Volumes() *volumes.Service { return s.vols }

// Identity returns the identity aggregate: tokens, owners' limits, the
// audit log, sessions and SSH keys.
func (s *Service) Identity() *identity.Service { return s.ids }

// driverMounts are the engine mounts of a sandbox's volumes.
func driverMounts(ms []sandpit.VolumeMount) []driver.Mount {
	if len(ms) == 0 {
		return nil
	}
	out := make([]driver.Mount, 0, len(ms))
	for _, m := range ms {
		out = append(out, driver.Mount{Source: m.EngineName, Target: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

// withMounts fills a read sandbox's volumes, which its row does not carry.
func (s *Service) withMounts(ctx context.Context, sb sandpit.Sandbox) sandpit.Sandbox {
	if sb.ID == "" {
		return sb
	}
	ms, err := s.store.SandboxMounts(ctx, sb.ID)
	if err != nil {
		s.log.Warn("reading a sandbox's mounts", "sandbox", sb.ID, "err", err)
		return sb
	}
	sb.Volumes = ms
	return sb
}
