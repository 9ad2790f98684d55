package driver

import (
	"context"
	"errors"
)

// LabelVolumeID marks an engine volume with the id of its volumes row, so a
// restarted daemon matches the engine's volumes with its store.
const LabelVolumeID = "sandpit.volume-id"

// ErrVolumeBusy: the engine refuses to remove a volume a container still
// uses.
var ErrVolumeBusy = errors.New("engine volume in use")

// Mount is one volume mounted into a sandbox's container.
type Mount struct {
	// Source is the engine volume's name.
	Source string
	// Target is the absolute path inside the container.
	Target   string
	ReadOnly bool
}

// EngineVolume is the engine's view of one volume.
type EngineVolume struct {
	Name   string
	Labels map[string]string
}

// Volumes makes and removes the engine's named volumes. driver/docker is the
// implementation; it is separate from Driver so that a driver without
// persistent storage still is a Driver, and mounts reach the container only
// through Spec.Mounts.
type Volumes interface {
	// CreateVolume makes the named volume with the labels. Making a volume
	// that exists is not an error: a retried create finishes the first.
	CreateVolume(ctx context.Context, name string, labels map[string]string) error
	// RemoveVolume removes the named volume; a missing one is not an
	// error, one a container still uses fails with ErrVolumeBusy.
	RemoveVolume(ctx context.Context, name string) error
	// ListVolumes returns the volumes carrying every given label.
	ListVolumes(ctx context.Context, labels map[string]string) ([]EngineVolume, error)
	// VolumeUsage is the disk space the named volume's files take, in
	// bytes (allocated blocks, so a sparse file counts what it uses).
	VolumeUsage(ctx context.Context, name string) (int64, error)
}
