package v1

import (
	"net/http"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/secrets"
)

// ServeSecrets mounts the owner's secrets (docs/secrets.md) on sec. Their
// values are write-only: no answer here carries one. Reading the names
// needs only the read right; writing one changes what the owner's
// sandboxes' requests may carry, so it needs manage, as a sandbox's create
// does. A create is idempotent by name (and by Idempotency-Key).
func (h *Handler) ServeSecrets(sec *secrets.Service) {
	h.secrets = sec
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	keyed("POST /v1/secrets", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.createSecret)
	route("GET /v1/secrets", sandpit.ActionRead, h.listSecrets)
	route("GET /v1/secrets/{name}", sandpit.ActionRead, h.getSecret)
	keyed("PUT /v1/secrets/{name}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.updateSecret)
	keyed("DELETE /v1/secrets/{name}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.deleteSecret)
}

func (h *Handler) createSecret(w http.ResponseWriter, r *http.Request) {
	var req apitypes.CreateSecretRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	s, outcome, err := h.secrets.Create(r.Context(), req.Name, req.Value, req.Metadata)
	if err != nil {
		fail(w, err)
		return
	}
	status := http.StatusCreated
	if outcome == sandpit.AlreadyBound {
		status = http.StatusOK
	}
	api.WriteJSON(w, status, toSecret(s))
}

func (h *Handler) listSecrets(w http.ResponseWriter, r *http.Request) {
	ss, err := h.secrets.List(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.ListSecretsResponse{Secrets: make([]apitypes.Secret, 0, len(ss))}
	for _, s := range ss {
		out.Secrets = append(out.Secrets, toSecret(s))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) getSecret(w http.ResponseWriter, r *http.Request) {
	s, err := h.secrets.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, toSecret(s))
}

func (h *Handler) updateSecret(w http.ResponseWriter, r *http.Request) {
	var req apitypes.UpdateSecretRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	s, err := h.secrets.Update(r.Context(), r.PathValue("name"), req.Value, req.Metadata)
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, toSecret(s))
}

func (h *Handler) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := h.secrets.Delete(r.Context(), r.PathValue("name")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func toSecret(s secrets.Secret) apitypes.Secret {
	return apitypes.Secret{ID: s.ID, Name: s.Name, Metadata: s.Metadata, Version: s.Version, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, Hosts: s.Hosts}
}
