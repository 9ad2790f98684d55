package daytona

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// SandboxVolume is one volume of a Daytona create (and of a sandbox read
// back): the volume's id (sandpit also takes its name) and where it is
// mounted.
type SandboxVolume struct {
	VolumeID  string `json:"volumeId"`
	MountPath string `json:"mountPath"`
	Subpath   string `json:"subpath,omitempty"`
}

// Volume is Daytona's volume model, with every field the SDK reads.
type Volume struct {
	ID             string  `json:"id"`
	Name           string  `json:"name"`
	OrganizationID string  `json:"organizationId"`
	State          string  `json:"state"`
	CreatedAt      string  `json:"createdAt"`
	UpdatedAt      string  `json:"updatedAt"`
	LastUsedAt     *string `json:"lastUsedAt"`
	ErrorReason    *string `json:"errorReason"`
}

// volumeAPI serves Daytona's /volumes. A create is idempotent by name, and
// answers once the volume is ready: Daytona's server answers pending_create
// and the SDK's callers poll, which a ready answer satisfies at once.
type volumeAPI struct {
	svc VolumeBackend
}

type createVolumeRequest struct {
	Name string `json:"name"`
}

func (h *volumeAPI) create(w http.ResponseWriter, r *http.Request) {
	var req createVolumeRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		WriteError(w, r, err)
		return
	}
	v, _, err := h.svc.CreateVolume(r.Context(), req.Name, 0)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, toVolume(v))
}

func (h *volumeAPI) list(w http.ResponseWriter, r *http.Request) {
	vs, err := h.svc.ListVolumes(r.Context())
	if err != nil {
		WriteError(w, r, err)
		return
	}
	out := make([]Volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, toVolume(v))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *volumeAPI) getByName(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, r.PathValue("name"), "name")
}

func (h *volumeAPI) get(w http.ResponseWriter, r *http.Request) {
	h.answer(w, r, r.PathValue("volumeId"), "ID")
}

func (h *volumeAPI) answer(w http.ResponseWriter, r *http.Request, ref, by string) {
	v, err := h.svc.GetVolume(r.Context(), ref)
	if err != nil {
		WriteError(w, r, volumeError(err, by, ref))
		return
	}
	api.WriteJSON(w, http.StatusOK, toVolume(v))
}

func (h *volumeAPI) delete(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("volumeId")
	if err := h.svc.DeleteVolume(r.Context(), ref); err != nil {
		WriteError(w, r, volumeError(err, "ID", ref))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// volumeError puts a missing or mounted volume in Daytona's words.
func volumeError(err error, by, ref string) error {
	switch {
	case errors.Is(err, sandpit.ErrNotFound):
		return &problem{status: http.StatusNotFound, message: fmt.Sprintf("Volume with %s %s not found", by, ref)}
	case errors.Is(err, sandpit.ErrVolumeInUse):
		return &problem{status: http.StatusConflict, message: fmt.Sprintf("Volume %s is in use by one or more sandboxes", ref)}
	}
	return err
}

func toVolume(v sandpit.Volume) Volume {
	state := string(v.State)
	if v.State == sandpit.VolumeCreating {
		state = "pending_create"
	}
	return Volume{
		ID: v.ID, Name: v.Name, OrganizationID: organizationID, State: state,
		CreatedAt: v.CreatedAt.UTC().Format(isoMillis), UpdatedAt: v.UpdatedAt.UTC().Format(isoMillis),
	}
}
