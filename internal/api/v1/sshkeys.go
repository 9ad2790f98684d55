package v1

import (
	"errors"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// sshKeyRoutes are the owner's SSH public keys (docs/ssh.md). Adding or
// removing a key changes who may open a shell in the owner's sandboxes, so
// it needs the execute right; a read-only token may only list them. An add
// is idempotent by key (and by Idempotency-Key).
func (h *Handler) sshKeyRoutes() {
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	keyed("POST /v1/ssh-keys", sandpit.ActionExecute, api.Keying{Mode: api.Keyed}, h.addSSHKey)
	route("GET /v1/ssh-keys", sandpit.ActionRead, h.listSSHKeys)
	keyed("DELETE /v1/ssh-keys/{key}", sandpit.ActionExecute, api.Keying{Mode: api.Keyed}, h.deleteSSHKey)
	keyed("POST /v1/sandboxes/{id}/ssh-access", sandpit.ActionExecute, api.Keying{Mode: api.Keyed}, h.createSSHAccess)
	keyed("DELETE /v1/sandboxes/{id}/ssh-access", sandpit.ActionExecute, api.Keying{Mode: api.Keyed}, h.revokeSSHAccess)
}

// createSSHAccess mints a short-lived SSH token for the sandbox. Keyed by
// Idempotency-Key, a retry is answered with the same token.
func (h *Handler) createSSHAccess(w http.ResponseWriter, r *http.Request) {
	var req apitypes.SSHAccessRequest
	if r.ContentLength != 0 {
		if err := api.DecodeJSON(r, &req, true); err != nil {
			fail(w, err)
			return
		}
	}
	if req.ValidMinutes < 0 {
		fail(w, errors.Join(sandpit.ErrInvalid, errors.New("valid_minutes must not be negative")))
		return
	}
	a, err := h.svc.CreateSSHAccess(r.Context(), r.PathValue("id"), time.Duration(req.ValidMinutes)*time.Minute)
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusCreated, apitypes.SSHAccess{Token: a.Token, SandboxID: a.SandboxID, ExpiresAt: a.ExpiresAt})
}

func (h *Handler) revokeSSHAccess(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.RevokeSSHAccess(r.Context(), r.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) addSSHKey(w http.ResponseWriter, r *http.Request) {
	var req apitypes.AddSSHKeyRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	k, outcome, err := h.ids.AddSSHKey(r.Context(), req.Name, req.PublicKey)
	if err != nil {
		fail(w, err)
		return
	}
	status := http.StatusCreated
	if outcome == sandpit.AlreadyBound {
		status = http.StatusOK
	}
	api.WriteJSON(w, status, toSSHKey(k))
}

func (h *Handler) listSSHKeys(w http.ResponseWriter, r *http.Request) {
	ks, err := h.ids.ListSSHKeys(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.ListSSHKeysResponse{Keys: make([]apitypes.SSHKey, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, toSSHKey(k))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) deleteSSHKey(w http.ResponseWriter, r *http.Request) {
	if err := h.ids.DeleteSSHKey(r.Context(), r.PathValue("key")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func toSSHKey(k sandpit.SSHKey) apitypes.SSHKey {
	out := apitypes.SSHKey{Fingerprint: k.Fingerprint, Name: k.Name, Owner: k.Owner, Type: k.Type, PublicKey: k.PublicKey, CreatedAt: k.CreatedAt}
	if !k.LastUsedAt.IsZero() {
		t := k.LastUsedAt
		out.LastUsedAt = &t
	}
	return out
}
