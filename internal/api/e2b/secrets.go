package e2b

import (
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/secrets"
)

// SecretInfo is E2B's Secret model: metadata only, since E2B's values are
// write-only as sandpit's are.
type SecretInfo struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

type newSecretBody struct {
	Name     string            `json:"name"`
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

type secretUpdateBody struct {
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// maxSecretPage is the most secrets one page of GET /secrets holds, and the
// page size when the SDK names none.
const maxSecretPage = 100

// secretRoutes serve E2B's Secret API on the owner's secrets, the same ones
// /v1/secrets holds (docs/secrets.md). Reading names needs the read right,
// writing the manage right, as on /v1.
func (h *Handler) secretRoutes() {
	if h.cfg.Secrets == nil {
		return
	}
	route, keyed := h.routes.Handle, h.routes.HandleKeyed
	keyed("POST /secrets", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.createSecret)
	route("GET /secrets", sandpit.ActionRead, h.listSecrets)
	route("GET /secrets/{secretID}", sandpit.ActionRead, h.getSecret)
	keyed("POST /secrets/{secretID}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.updateSecret)
	keyed("DELETE /secrets/{secretID}", sandpit.ActionManage, api.Keying{Mode: api.Keyed}, h.deleteSecret)
}

func toSecretInfo(s secrets.Secret) SecretInfo {
	return SecretInfo{SecretID: s.ID, Name: s.Name, CurrentVersion: s.Version, Metadata: s.Metadata, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// createSecret serves POST /secrets. The SDK retries a create it did not
// hear the answer of; the same name and value again answers the secret it
// made (201, as the first answer was), another value 409.
func (h *Handler) createSecret(w http.ResponseWriter, r *http.Request) {
	var b newSecretBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, "")
		return
	}
	s, _, err := h.cfg.Secrets.Create(r.Context(), b.Name, b.Value, b.Metadata)
	if err != nil {
		fail(w, err, "")
		return
	}
	api.WriteJSON(w, http.StatusCreated, toSecretInfo(s))
}

// listSecrets serves GET /secrets, by name, a page at a time: nextToken is
// the last name of the page before, and X-Next-Token is set while more
// remain, which is how the SDK's paginator reads it.
func (h *Handler) listSecrets(w http.ResponseWriter, r *http.Request) {
	limit := maxSecretPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "limit must be a positive integer")
			return
		}
		limit = min(n, maxSecretPage)
	}
	ss, err := h.cfg.Secrets.List(r.Context())
	if err != nil {
		fail(w, err, "")
		return
	}
	after := r.URL.Query().Get("nextToken")
	start := sort.Search(len(ss), func(i int) bool { return ss[i].Name > after })
	if after == "" {
		start = 0
	}
	page := ss[start:min(len(ss), start+limit)]
	if start+limit < len(ss) {
		w.Header().Set("X-Next-Token", page[len(page)-1].Name)
	}
	out := make([]SecretInfo, 0, len(page))
	for _, s := range page {
		out = append(out, toSecretInfo(s))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) getSecret(w http.ResponseWriter, r *http.Request) {
	s, err := h.cfg.Secrets.Get(r.Context(), r.PathValue("secretID"))
	if err != nil {
		fail(w, err, "")
		return
	}
	api.WriteJSON(w, http.StatusOK, toSecretInfo(s))
}

func (h *Handler) updateSecret(w http.ResponseWriter, r *http.Request) {
	var b secretUpdateBody
	if err := api.DecodeJSON(r, &b, false); err != nil {
		fail(w, err, "")
		return
	}
	s, err := h.cfg.Secrets.Update(r.Context(), r.PathValue("secretID"), b.Value, b.Metadata)
	if err != nil {
		fail(w, err, "")
		return
	}
	api.WriteJSON(w, http.StatusOK, toSecretInfo(s))
}

func (h *Handler) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := h.cfg.Secrets.Delete(r.Context(), r.PathValue("secretID")); err != nil {
		fail(w, err, "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
