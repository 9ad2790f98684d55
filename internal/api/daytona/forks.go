package daytona

import (
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// forkBody is ForkSandbox and CreateSandboxSnapshot: a name.
type forkBody struct {
	Name string `json:"name,omitempty"`
}

// fork serves POST /sandbox/{idOrName}/fork: one copy of the sandbox, made
// from a snapshot of it, with its files, limits, environment and labels.
// The SDK then waits for the copy to be started, which it already is.
func (h *sandboxAPI) fork(w http.ResponseWriter, r *http.Request) {
	var b forkBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		WriteError(w, r, err)
		return
	}
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	results, err := h.svc.Fork(r.Context(), sb.ID, service.ForkRequest{Count: 1, Name: b.Name, Seed: api.TargetID(r.Context())})
	if err == nil {
		err = results[0].Err
	}
	if err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r, results[0].Sandbox, true))
}

// snapshot serves POST /sandbox/{idOrName}/snapshot: the sandbox's
// filesystem becomes a snapshot of that name, which snapshot.list shows and
// creates take. The commit ends before the answer, so the sandbox is back
// in its state when the SDK looks.
func (h *sandboxAPI) snapshot(w http.ResponseWriter, r *http.Request) {
	var b forkBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		WriteError(w, r, err)
		return
	}
	if b.Name == "" {
		WriteError(w, r, badRequest("a snapshot needs a name"))
		return
	}
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if _, err := h.svc.CreateSnapshot(r.Context(), sb.ID, service.SnapshotRequest{ID: api.TargetID(r.Context()), Name: b.Name}); err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	after, err := h.svc.GetSandboxByIDOrName(r.Context(), sb.ID)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r, after, true))
}
