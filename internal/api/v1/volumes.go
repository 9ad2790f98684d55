package v1

import (
	"net/http"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// volumeRoutes are the native volume API. A create is idempotent by name
// (and by Idempotency-Key); a delete of a mounted volume is refused.
func (h *Handler) volumeRoutes() {
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	keyed("POST /v1/volumes", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.createVolume)
	route("GET /v1/volumes", sandpit.ActionRead, h.listVolumes)
	route("GET /v1/volumes/{name}", sandpit.ActionRead, h.getVolume)
	keyed("DELETE /v1/volumes/{name}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.deleteVolume)
}

func (h *Handler) createVolume(w http.ResponseWriter, r *http.Request) {
	var req apitypes.CreateVolumeRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	v, outcome, err := h.vols.CreateVolume(r.Context(), req.Name, req.SizeMB)
	if err != nil {
		fail(w, err)
		return
	}
	status := http.StatusCreated
	if outcome == sandpit.AlreadyBound {
		status = http.StatusOK
	}
	api.WriteJSON(w, status, h.toVolume(v))
}

func (h *Handler) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := h.vols.ListVolumes(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.ListVolumesResponse{Volumes: make([]apitypes.Volume, 0, len(vs))}
	for _, v := range vs {
		out.Volumes = append(out.Volumes, h.toVolume(v))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := h.vols.GetVolume(r.Context(), r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toVolume(v))
}

func (h *Handler) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := h.vols.DeleteVolume(r.Context(), r.PathValue("name")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) toVolume(v sandpit.Volume) apitypes.Volume {
	return apitypes.Volume{ID: v.ID, Name: v.Name, State: string(v.State), SizeMB: h.svc.Config().VolumeLimitMB(v.SizeMB), CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt}
}

func toMounts(ms []sandpit.VolumeMount) []apitypes.VolumeMount {
	if len(ms) == 0 {
		return nil
	}
	out := make([]apitypes.VolumeMount, 0, len(ms))
	for _, m := range ms {
		name := m.VolumeName
		if name == "" {
			name = m.VolumeID
		}
		out = append(out, apitypes.VolumeMount{Volume: name, VolumeID: m.VolumeID, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}
