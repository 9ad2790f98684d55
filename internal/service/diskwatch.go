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

// RunDiskWatcher enforces Config.DiskWatchMB where the engine cannot
// enforce a disk limit itself (overlay2 over ext4): every interval it
// measures each running sandbox's writable layer and stops one past the
// limit, with the stopped event and the state reason ReasonDiskLimit. A
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
	limit := s.cfg.DiskWatchMB << 20
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
			used, err := s.rt.DiskUsage(ctx, sb.ContainerID)
			if err != nil || used <= limit {
				continue
			}
			s.stopForDisk(ctx, sb.ID, used)
		}
		if next == "" {
			return
		}
		token = next
	}
}

// stopForDisk stops a sandbox that wrote past its disk limit.
func (s *Service) stopForDisk(ctx context.Context, id string, used int64) {
	sb, unlock, err := s.lockRow(ctx, id)
	if err != nil {
		return
	}
	defer unlock()
	if sb.State != sandpit.StateRunning {
		return
	}
	s.log.Warn("disk watcher: sandbox past its disk limit; stopping it", "sandbox", id, "used_mb", used>>20, "limit_mb", s.cfg.DiskWatchMB)
	if _, err := s.stopLockedFor(ctx, sb, sandpit.ReasonDiskLimit); err != nil && !errors.Is(err, ErrDeletedOnStop) {
		s.log.Error("disk watcher: stop", "sandbox", id, "err", err)
	}
}
