package apitypes

import "time"

// Volume is named, owned storage that outlives the sandboxes mounting it.
type Volume struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// State is creating, ready or deleting; only a ready volume mounts.
	State string `json:"state"`
	// SizeMB is the most the volume may hold, in MiB; absent when the
	// daemon bounds no volume.
	SizeMB    int64     `json:"size_mb,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	Name string `json:"name"`
	// SizeMB is the most the volume may hold, in MiB: at most the daemon's
	// --volume-size-mb, which is the default.
	SizeMB int64 `json:"size_mb,omitempty"`
}

// ListVolumesResponse is the body of GET /v1/volumes.
type ListVolumesResponse struct {
	Volumes []Volume `json:"volumes"`
}

// VolumeMount is one volume mounted into a sandbox.
type VolumeMount struct {
	// Volume names the volume (by name or id on a create; its name, or id
	// when it has none, when read back).
	Volume string `json:"volume"`
	// VolumeID is the volume's id (read back only).
	VolumeID string `json:"volume_id,omitempty"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}
