package service

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/store"
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
func (c Config) DiskLimitMB(mb int64) int64 { return limitOr(mb, c.MaxDiskMB()) }

// VolumeLimitMB is the size in force of a volume whose row says mb: mb, or
// the daemon's --volume-size-mb for 0; 0 when volumes are unbounded.
func (c Config) VolumeLimitMB(mb int64) int64 { return limitOr(mb, c.VolumeSizeMB) }

// limitOr is a limit of mb MiB where the daemon's is def: mb itself, or def
// for 0; 0 (none) when the daemon sets none.
func limitOr(mb, def int64) int64 {
	if mb <= 0 || def == 0 {
		return def
	}
	return mb
}

// quotaMB is the size the engine's quota gives sb's writable layer: its
// limit where the engine enforces one, else 0 (the watcher's mode, or none).
func (c Config) quotaMB(sb sandpit.Sandbox) int64 {
	if c.DiskMB <= 0 {
		return 0
	}
	return c.DiskLimitMB(sb.DiskMB)
}

// validateDisk checks a create's disk_mb: 0 takes the default, else it
// lies between minDiskMB and the daemon's --disk-mb.
func (c Config) validateDisk(mb int64) error {
	return validateSize("disk_mb", "--disk-mb", "limits no sandbox's disk", mb, c.MaxDiskMB())
}

// validateSize checks a create's size field of mb MiB against the daemon's
// flag, whose value limit is both the default and the maximum (0: the
// daemon bounds none, none says what, and no size may be asked for).
func validateSize(field, flag, none string, mb, limit int64) error {
	switch {
	case mb == 0:
		return nil
	case limit == 0:
		return invalidf("%s: this daemon %s (%s 0), so a create cannot ask for one", field, none, flag)
	case mb < minDiskMB || mb > limit:
		return invalidf("%s must be 0 (the default, %d MiB) or between %d and %d MiB (the daemon's %s), got %d", field, limit, minDiskMB, limit, flag, mb)
	}
	return nil
}

// RunDiskWatcher enforces each sandbox's disk limit (its disk_mb, else
// Config.DiskWatchMB) where the engine cannot enforce a disk limit itself
// (overlay2 over ext4), and volumes' sizes, which no engine quota covers:
// every interval it measures each running sandbox's writable layer and the
// volumes it mounts writable, and stops one past its limit (state reason
// ReasonDiskLimit) or writing into a volume past its size (every sandbox
// mounting that volume writable, ReasonVolumeSize), with the stopped event.
// A sandbox can write faster than the watcher looks, so the limit holds
// within an interval's worth of writing, not to the byte: a hard quota
// (xfs with pquota, --disk-mb) is the exact bound of a writable layer.
func (s *Service) RunDiskWatcher(ctx context.Context, interval time.Duration) {
	if s.cfg.DiskWatchMB <= 0 && (s.cfg.VolumeSizeMB <= 0 || s.cfg.Volumes == nil) {
		return
	}
	if interval <= 0 {
		interval = DefaultDiskWatchInterval
	}
	w := &diskWatcher{cfg: s.cfg, store: s.store, rt: s.rt, log: s.log, svc: s}
	every(ctx, interval, func() { w.watchDisk(ctx) })
}

// diskWatcher is RunDiskWatcher's round: it measures the running sandboxes'
// writable layers and writable volumes and stops those past their limits.
type diskWatcher struct {
	cfg   Config
	store *store.Store
	rt    driver.Driver
	log   *slog.Logger
	// svc is the service whose lifecycle stops a sandbox: a stop for disk
	// takes the sandbox's lock and stops it exactly as any other stop does,
	// so the watcher calls those operations rather than keeping copies.
	svc *Service
}

func (w *diskWatcher) watchDisk(ctx context.Context) {
	// A volume mounted by several sandboxes is measured once a round.
	volumes := map[string]int64{}
	token := ""
	for ctx.Err() == nil {
		page, next, err := w.store.ListSandboxes(ctx, sandpit.ListOptions{Limit: 500, PageToken: token, States: []sandpit.State{sandpit.StateRunning}})
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("disk watcher: list sandboxes", "err", err)
			}
			return
		}
		for _, sb := range page {
			if w.cfg.DiskWatchMB > 0 {
				limit := w.cfg.DiskLimitMB(sb.DiskMB)
				if used, err := w.rt.DiskUsage(ctx, sb.ContainerID); err == nil && used > limit<<20 {
					w.stopForDisk(ctx, sb.ID, sandpit.ReasonDiskLimit, "", used, limit)
					continue
				}
			}
			w.watchVolumes(ctx, sb.ID, volumes)
		}
		if next == "" {
			return
		}
		token = next
	}
}

// watchVolumes stops sandbox id if a volume it mounts writable holds more
// than its size. used caches each volume's usage over one round.
func (w *diskWatcher) watchVolumes(ctx context.Context, id string, used map[string]int64) {
	if w.cfg.VolumeSizeMB <= 0 || w.cfg.Volumes == nil {
		return
	}
	mounts, err := w.store.SandboxMounts(ctx, id)
	if err != nil {
		return
	}
	for _, m := range mounts {
		if m.ReadOnly {
			continue
		}
		u, ok := used[m.VolumeID]
		if !ok {
			if u, err = w.cfg.Volumes.VolumeUsage(ctx, m.EngineName); err != nil {
				w.log.Warn("disk watcher: cannot measure a volume; its size is not enforced", "volume", m.VolumeID, "err", err)
			}
			used[m.VolumeID] = u
		}
		if size := w.cfg.VolumeLimitMB(m.SizeMB); u > size<<20 {
			w.stopForDisk(ctx, id, sandpit.ReasonVolumeSize, m.VolumeID, u, size)
			return
		}
	}
}

// stopForDisk stops a sandbox that wrote past its disk limit or into a
// volume past its size (volume names it), for reason.
func (w *diskWatcher) stopForDisk(ctx context.Context, id, reason, volume string, used, limitMB int64) {
	sb, unlock, err := w.svc.lockRow(ctx, id)
	if err != nil {
		return
	}
	defer unlock()
	if sb.State != sandpit.StateRunning {
		return
	}
	if volume == "" {
		w.log.Warn("disk watcher: sandbox past its disk limit; stopping it", "sandbox", id, "used_mb", used>>20, "limit_mb", limitMB)
	} else {
		w.log.Warn("disk watcher: sandbox writes into a volume past its size; stopping it", "sandbox", id, "volume", volume, "used_mb", used>>20, "size_mb", limitMB)
	}
	if _, err := w.svc.stopLockedFor(ctx, sb, reason); err != nil && !errors.Is(err, ErrDeletedOnStop) {
		w.log.Error("disk watcher: stop", "sandbox", id, "err", err)
	}
}
