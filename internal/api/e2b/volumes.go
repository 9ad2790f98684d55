package e2b

import (
	"errors"
	"net/http"
	"sort"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// VolumeMount is one entry of a create's volumeMounts and of a sandbox's:
// the volume's name and where it is mounted.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// VolumeInfo is E2B's volume model. Token and Domain are for the volume
// content API, which sandpit does not serve; they are empty.
type VolumeInfo struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
	Domain   string `json:"domain,omitempty"`
}

type createVolumeBody struct {
	Name string `json:"name"`
}

func (b CreateBody) mounts() []service.MountRequest {
	var out []service.MountRequest
	for _, m := range b.VolumeMounts {
		out = append(out, service.MountRequest{Volume: m.Name, Path: m.Path})
	}
	return out
}

// sortedMounts orders mounts by path for the fingerprint: the SDK builds
// them from an object, whose order says nothing.
func sortedMounts(ms []VolumeMount) []VolumeMount {
	if len(ms) == 0 {
		return nil
	}
	out := append([]VolumeMount(nil), ms...)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func mountsOf(sb sandpit.Sandbox) []VolumeMount {
	out := []VolumeMount{}
	for _, m := range sb.Volumes {
		name := m.VolumeName
		if name == "" {
			name = m.VolumeID
		}
		out = append(out, VolumeMount{Name: name, Path: m.Path})
	}
	return out
}

// createVolume serves POST /volumes: idempotent by name, so the SDK's
// retry of a create it did not hear the answer of returns the same volume.
func (h *Handler) createVolume(w http.ResponseWriter, r *http.Request) {
	var b createVolumeBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, "")
		return
	}
	v, outcome, err := h.vols.CreateVolume(r.Context(), b.Name, 0)
	if err != nil {
		fail(w, err, "")
		return
	}
	status := http.StatusCreated
	if outcome == sandpit.AlreadyBound {
		status = http.StatusOK
	}
	api.WriteJSON(w, status, toVolumeInfo(v))
}

func (h *Handler) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := h.vols.ListVolumes(r.Context())
	if err != nil {
		fail(w, err, "")
		return
	}
	out := make([]VolumeInfo, 0, len(vs))
	for _, v := range vs {
		out = append(out, toVolumeInfo(v))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) getVolume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("volumeID")
	v, err := h.vols.GetVolume(r.Context(), id)
	if err != nil {
		failVolume(w, err, id)
		return
	}
	api.WriteJSON(w, http.StatusOK, toVolumeInfo(v))
}

func (h *Handler) deleteVolume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("volumeID")
	if err := h.vols.DeleteVolume(r.Context(), id); err != nil {
		failVolume(w, err, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func failVolume(w http.ResponseWriter, err error, id string) {
	if errors.Is(err, sandpit.ErrNotFound) {
		writeError(w, http.StatusNotFound, "volume "+id+" not found")
		return
	}
	fail(w, err, "")
}

func toVolumeInfo(v sandpit.Volume) VolumeInfo {
	return VolumeInfo{VolumeID: v.ID, Name: v.Name}
}

// withMounts fills a listed sandbox's volumes, which a listing's rows do
// not carry.
func (h *Handler) withMounts(r *http.Request, sb sandpit.Sandbox) sandpit.Sandbox {
	if ms, err := h.vols.SandboxMounts(r.Context(), sb.ID); err == nil {
		sb.Volumes = ms
	}
	return sb
}
