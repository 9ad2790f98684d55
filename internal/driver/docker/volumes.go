package docker

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"syscall"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/errdefs"

	"github.com/sandpit-dev/sandpit/internal/driver"
)

var _ driver.Volumes = (*Docker)(nil)

// CreateVolume makes a local named volume. The engine answers a create of an
// existing name with that volume, which is what a retried create needs.
func (d *Docker) CreateVolume(ctx context.Context, name string, labels map[string]string) error {
	l := maps.Clone(labels)
	if l == nil {
		l = map[string]string{}
	}
	l[driver.LabelManaged] = "true"
	if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Driver: "local", Labels: l}); err != nil {
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	return nil
}

// RemoveVolume removes the named volume; a missing one is not an error.
func (d *Docker) RemoveVolume(ctx context.Context, name string) error {
	err := d.cli.VolumeRemove(ctx, name, false)
	switch {
	case err == nil, errdefs.IsNotFound(err):
		return nil
	case errdefs.IsConflict(err):
		return fmt.Errorf("remove volume %s: %w: %v", name, driver.ErrVolumeBusy, err)
	}
	return fmt.Errorf("remove volume %s: %w", name, err)
}

// ListVolumes returns the volumes carrying every given label.
func (d *Docker) ListVolumes(ctx context.Context, labels map[string]string) ([]driver.EngineVolume, error) {
	f := filters.NewArgs()
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	resp, err := d.cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	out := make([]driver.EngineVolume, 0, len(resp.Volumes))
	for _, v := range resp.Volumes {
		if v == nil {
			continue
		}
		out = append(out, driver.EngineVolume{Name: v.Name, Labels: v.Labels})
	}
	return out, nil
}

// VolumeUsage walks the local volume's directory on the engine's host, which
// must be this machine: the engine reports volume sizes only through its
// whole-engine disk usage, which also walks every container's writable
// layer. It counts allocated blocks, each hard-linked file once.
func (d *Docker) VolumeUsage(ctx context.Context, name string) (int64, error) {
	v, err := d.cli.VolumeInspect(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("inspect volume %s: %w", name, err)
	}
	if v.Mountpoint == "" {
		return 0, fmt.Errorf("volume %s: the engine names no mountpoint", name)
	}
	var used int64
	seen := map[uint64]bool{}
	err = filepath.WalkDir(v.Mountpoint, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			if e == nil {
				return err // the mountpoint itself: not on this host, or not ours to read
			}
			return nil // a file removed meanwhile
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if st.Nlink > 1 && !e.IsDir() {
				if seen[st.Ino] {
					return nil
				}
				seen[st.Ino] = true
			}
			used += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measure volume %s: %w", name, err)
	}
	return used, nil
}
