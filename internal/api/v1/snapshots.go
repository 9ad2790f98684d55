package v1

import (
	"errors"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// snapshotRoutes are the native snapshot and fork API. A snapshot and a
// fork are made from a sandbox, so they are served by the sandbox's node in
// a cluster (the default forwarding of /v1/sandboxes/{id}/...); the
// snapshots themselves are templates, found as templates are.
func (h *Handler) snapshotRoutes() {
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	keyed("POST /v1/sandboxes/{id}/snapshots", sandpit.ActionManage, api.Keying{Mode: api.KeyedCreate, Prefix: templates.IDPrefix}, h.createSnapshot)
	keyed("POST /v1/sandboxes/{id}/fork", sandpit.ActionManage, api.Keying{Mode: api.KeyedCreate}, h.fork)
	route("GET /v1/snapshots", sandpit.ActionRead, h.listSnapshots)
	route("GET /v1/snapshots/{name}", sandpit.ActionRead, h.getSnapshot)
	keyed("DELETE /v1/snapshots/{name}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.deleteSnapshot)
}

func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req apitypes.SnapshotRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	ctx := r.Context()
	t, err := h.svc.CreateSnapshot(ctx, r.PathValue("id"), service.SnapshotRequest{ID: IDFromContext(ctx), Name: req.Name})
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusCreated, h.toTemplate(r, t))
}

func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ForkRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.TimeoutS < 0 {
		fail(w, errors.Join(sandpit.ErrInvalid, errors.New("timeout_s must not be negative")))
		return
	}
	ctx := r.Context()
	results, err := h.svc.Fork(ctx, r.PathValue("id"), service.ForkRequest{
		Seed: IDFromContext(ctx), Count: req.Count, Timeout: time.Duration(req.TimeoutS) * time.Second, Name: req.Name,
	})
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.ForkResponse{Forks: make([]apitypes.ForkResult, 0, len(results))}
	for _, res := range results {
		if res.Err != nil {
			p := api.Classify(res.Err)
			out.Forks = append(out.Forks, apitypes.ForkResult{Error: &apitypes.ErrorDetail{Code: p.Code, Message: p.Message}})
			continue
		}
		sb := h.toSandbox(ctx, res.Sandbox)
		out.Forks = append(out.Forks, apitypes.ForkResult{Sandbox: &sb})
	}
	api.WriteJSON(w, http.StatusCreated, out)
}

func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ts, err := h.tpl.Snapshots(r.Context(), q.Get("sandbox"), q.Get("name"))
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.ListSnapshotsResponse{Snapshots: make([]apitypes.Template, 0, len(ts))}
	for _, t := range ts {
		out.Snapshots = append(out.Snapshots, h.toTemplate(r, t))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// snapshot finds the path's snapshot: a template of kind snapshot.
func (h *Handler) snapshot(r *http.Request) (sandpit.Template, error) {
	t, err := h.tpl.Template(r.Context(), r.PathValue("name"))
	if err == nil && t.Kind.Or() != sandpit.KindSnapshot {
		err = api.Problem{Status: http.StatusNotFound, Code: apitypes.CodeNotFound, Message: "no snapshot " + r.PathValue("name")}
	}
	return t, err
}

func (h *Handler) getSnapshot(w http.ResponseWriter, r *http.Request) {
	t, err := h.snapshot(r)
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toTemplate(r, t))
}

func (h *Handler) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	t, err := h.snapshot(r)
	if err == nil {
		err = h.tpl.DeleteSnapshot(r.Context(), t.ID)
	}
	if err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
