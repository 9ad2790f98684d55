package service

import (
	"context"
	"errors"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// DefaultDiskWatchInterval is how often the disk watcher measures the
// running sandboxes.
const DefaultDiskWatchInterval = 5 * time.Second

// MaxDiskMB is the daemon's --disk-mb, in whichever mode enforces it:
// every sandbox's limit unless its create asked for less, and the most one
// may ask for; 0 when the daemon limits no sandbox's disk.
func (c Config) MaxDiskMB() int64 { return max(c.DiskMB, c.DiskWatchMB) }

// DiskLimitMB is the disk limit in force for a sandbox whose row or create
// says mb: mb itself, or the daemon's default for 0; 0 when the daemon
// limits none.
func (c Config) DiskLimitMB(mb int64) int64 {
	if mb <= 0 || c.MaxDiskMB() == 0 {
		return c.MaxDiskMB()
	}
	return mb
}

// quotaMB is the size the engine's quota gives sb's writable layer: its
// limit where the engine enforces one, else 0 (the watcher's mode, or none).
func (s *Service) quotaMB(sb sandpit.Sandbox) int64 {
	if s.cfg.DiskMB <= 0 {
		return 0
	}
	return s.cfg.DiskLimitMB(sb.DiskMB)
}

// validateDisk checks a create's disk_mb: 0 takes the default, else it
// lies between minDiskMB and the daemon's --disk-mb.
func (s *Service) validateDisk(mb int64) error {
	limit := s.cfg.MaxDiskMB()
	switch {
	case mb == 0:
		return nil
	case limit == 0:
		return invalidf("disk_mb: this daemon limits no sandbox's disk (--disk-mb 0), so a create cannot ask for a limit")
	case mb < minDiskMB || mb > limit:
		return invalidf("disk_mb must be 0 (the default, %d MiB) or between %d and %d MiB (the daemon's --disk-mb), got %d", limit, minDiskMB, limit, mb)
	}
	return nil
}

// RunDiskWatcher enforces each sandbox's disk limit (its disk_mb, else
// Config.DiskWatchMB) where the engine cannot enforce a disk limit itself
// (overlay2 over ext4): every interval it measures each running sandbox's
// writable layer and stops one past its limit, with the stopped event and the state reason ReasonDiskLimit. A
// sandbox can write faster than the watcher looks, so the limit holds
// within an interval's worth of writing, not to the byte: a hard quota
// (xfs with pquota, --disk-mb) is the exact bound.
func (s *Service) RunDiskWatcher(ctx context.Context, interval time.Duration) {
	if s.cfg.DiskWatchMB <= 0 {
		return
	}
	if interval <= 0 {
		interval = DefaultDiskWatchInterval
	}
	every(ctx, interval, func() { s.watchDisk(ctx) })
}

func (s *Service) watchDisk(ctx context.Context) {
	token := ""
	for ctx.Err() == nil {
		page, next, err := s.store.ListSandboxes(ctx, sandpit.ListOptions{Limit: 500, PageToken: token, States: []sandpit.State{sandpit.StateRunning}})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("disk watcher: list sandboxes", "err", err)
			}
			return
		}
		for _, sb := range page {
			limit := s.cfg.DiskLimitMB(sb.DiskMB)
			used, err := s.rt.DiskUsage(ctx, sb.ContainerID)
			if err != nil || used <= limit<<20 {
				continue
			}
			s.stopForDisk(ctx, sb.ID, used, limit)
		}
		if next == "" {
			return
		}
		token = next
	}
}

// stopForDisk stops a sandbox that wrote past its disk limit.
func (s *Service) stopForDisk(ctx context.Context, id string, used, limitMB int64) {
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return
	}
	defer unlock()
	if sb.State != sandpit.StateRunning {
		return
	}
	s.log.Warn("disk watcher: sandbox past its disk limit; stopping it", "sandbox", id, "used_mb", used>>20, "limit_mb", limitMB)
	if _, err := s.stopLockedFor(ctx, sb, sandpit.ReasonDiskLimit); err != nil && !errors.Is(err, ErrDeletedOnStop) {
		s.log.Error("disk watcher: stop", "sandbox", id, "err", err)
	}
}
