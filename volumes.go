package sandpit

import (
	"errors"
	"time"
)

var (
	// ErrVolumeInUse: the volume is mounted by a sandbox (whatever its
	// state), so deleting it would pull storage out from under it.
	ErrVolumeInUse = errors.New("volume is mounted by a sandbox")
	// ErrVolumeNotReady: the volume is still being made or is being
	// deleted, so it cannot be mounted.
	ErrVolumeNotReady = errors.New("volume is not ready")
)

// VolumeState is where a volume is in its life.
type VolumeState string

const (
	// VolumeCreating: the row exists and the engine volume may not yet. A
	// daemon that stops here removes both when it starts again, so a
	// crashed create leaves nothing half made; its retry makes it anew.
	VolumeCreating VolumeState = "creating"
	// VolumeReady: the engine volume exists; sandboxes may mount it.
	VolumeReady VolumeState = "ready"
	// VolumeDeleting: a delete was decided (nothing mounted it); the engine
	// volume and then the row go, and a restart finishes what is left.
	VolumeDeleting VolumeState = "deleting"
)

// Volume is one row of the volumes table: named, owned storage that
// outlives the sandboxes that mount it.
type Volume struct {
	ID    string
	Owner string
	// Name is unique per owner when non-empty (a partial unique index);
	// "" is an anonymous volume reached by its id only.
	Name string
	// EngineName is the engine's name of the volume; it is derived from the
	// id, so a restarted daemon finds the engine volume of every row.
	EngineName string
	State      VolumeState
	// Node is the daemon instance whose engine holds the volume: a volume
	// lives on one node of a cluster.
	Node string
	// SizeMB is the most the volume may hold, in MiB; 0 reads as the
	// daemon's --volume-size-mb (volumes made before volumes had sizes).
	SizeMB    int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// VolumeMount is one volume mounted into one sandbox.
type VolumeMount struct {
	VolumeID string
	// VolumeName is the volume's name, filled when a mount is read back,
	// so the surfaces show what the user asked for.
	VolumeName string
	// EngineName is the engine volume's name, filled when read back.
	EngineName string
	// SizeMB is the volume's size, filled when read back.
	SizeMB int64
	// Path is the absolute path inside the sandbox.
	Path     string
	ReadOnly bool
}
