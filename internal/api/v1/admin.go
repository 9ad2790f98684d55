package v1

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// adminRoutes mounts token, owner-limit and audit administration. Tokens,
// audit and limit changes are admin only (the service refuses others with
// 403); an owner may read its own limits.
//
// POST /v1/tokens is deliberately not an Idempotency-Key route: a replay
// would have to store the response, and the response is the token in clear.
// A retried create is refused by the unique live name instead (409), and a
// token whose creation answer was lost is revoked and made again.
func (h *Handler) adminRoutes() {
	route := h.routes.Handle
	route("POST /v1/tokens", sandpit.ActionAdmin, h.createToken)
	route("GET /v1/tokens", sandpit.ActionAdmin, h.listTokens)
	route("DELETE /v1/tokens/{name}", sandpit.ActionAdmin, h.revokeToken)
	// An owner reads its own limits; the service refuses another owner's.
	route("GET /v1/owners/{owner}/limits", sandpit.ActionRead, h.getLimits)
	route("PUT /v1/owners/{owner}/limits", sandpit.ActionAdmin, h.putLimits)
	route("GET /v1/audit", sandpit.ActionAdmin, h.listAudit)
}

// limitsOf converts wire limits to the domain's.
func limitsOf(l apitypes.Limits, owner string) sandpit.OwnerLimits {
	return sandpit.OwnerLimits{Owner: owner, MaxSandboxes: l.MaxSandboxes, MaxCPU: l.MaxCPU, MaxMemoryMB: l.MaxMemoryMB, MaxPorts: l.MaxPorts, MaxDomains: l.MaxDomains,
		DefaultCPU: l.DefaultCPU, DefaultMemoryMB: l.DefaultMemoryMB, MaxSandboxCPU: l.MaxSandboxCPU, MaxSandboxMemoryMB: l.MaxSandboxMemoryMB,
		AllowPrivateCIDRs: l.AllowPrivateCIDRs}
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func toToken(t sandpit.Token) apitypes.Token {
	return apitypes.Token{Name: t.Name, Owner: t.Owner, Prefix: t.Prefix, Scopes: t.Scopes, CreatedAt: t.CreatedAt,
		LastUsedAt: optTime(t.LastUsedAt), ExpiresAt: optTime(t.ExpiresAt), RevokedAt: optTime(t.RevokedAt)}
}

func (h *Handler) createToken(w http.ResponseWriter, r *http.Request) {
	var req apitypes.TokenRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	if req.ExpiresInS < 0 {
		fail(w, errors.Join(sandpit.ErrInvalid, errors.New("expires_in_s must not be negative")))
		return
	}
	sreq := identity.TokenRequest{Name: req.Name, Owner: req.Owner, Scopes: req.Scopes, ExpiresIn: time.Duration(req.ExpiresInS) * time.Second}
	if req.Limits != nil {
		sreq.Limits = limitsOf(*req.Limits, req.Owner)
	}
	ct, err := h.ids.CreateToken(r.Context(), sreq)
	if err != nil {
		fail(w, err)
		return
	}
	out := toToken(ct.Token)
	out.Secret = ct.Secret
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusCreated, out)
}

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request) {
	ts, err := h.ids.ListTokens(r.Context(), r.URL.Query().Get("include_revoked") == "true")
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.TokenList{Tokens: make([]apitypes.Token, 0, len(ts))}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, toToken(t))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request) {
	t, err := h.ids.RevokeToken(r.Context(), r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, toToken(t))
}

func (h *Handler) writeLimits(w http.ResponseWriter, r *http.Request, owner string) {
	l, u, err := h.ids.OwnerLimits(r.Context(), owner)
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.OwnerLimits{Owner: owner, Limits: apitypes.Limits{MaxSandboxes: l.MaxSandboxes, MaxCPU: l.MaxCPU, MaxMemoryMB: l.MaxMemoryMB, MaxPorts: l.MaxPorts, MaxDomains: l.MaxDomains,
		DefaultCPU: l.DefaultCPU, DefaultMemoryMB: l.DefaultMemoryMB, MaxSandboxCPU: l.MaxSandboxCPU, MaxSandboxMemoryMB: l.MaxSandboxMemoryMB,
		AllowPrivateCIDRs: l.AllowPrivateCIDRs}}
	out.Usage.Sandboxes, out.Usage.CPU, out.Usage.MemoryMB, out.Usage.Ports = u.Sandboxes, u.CPU, u.MemoryMB, u.Ports
	out.Usage.Domains = u.Domains
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) getLimits(w http.ResponseWriter, r *http.Request) {
	h.writeLimits(w, r, r.PathValue("owner"))
}

func (h *Handler) putLimits(w http.ResponseWriter, r *http.Request) {
	var req apitypes.Limits
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	owner := r.PathValue("owner")
	if err := h.ids.SetOwnerLimits(r.Context(), limitsOf(req, owner)); err != nil {
		fail(w, err)
		return
	}
	h.writeLimits(w, r, owner)
}

func (h *Handler) listAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	aq := sandpit.AuditQuery{Owner: q.Get("owner")}
	if s := q.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			fail(w, errors.Join(sandpit.ErrInvalid, errors.New("after must be a non-negative integer")))
			return
		}
		aq.AfterSeq = n
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			fail(w, errors.Join(sandpit.ErrInvalid, errors.New("limit must be 1-1000")))
			return
		}
		aq.Limit = n
	}
	es, err := h.ids.ListAudit(r.Context(), aq)
	if err != nil {
		fail(w, err)
		return
	}
	out := apitypes.AuditPage{Entries: make([]apitypes.AuditEntry, 0, len(es)), NextAfter: aq.AfterSeq}
	for _, e := range es {
		out.Entries = append(out.Entries, apitypes.AuditEntry{Seq: e.Seq, At: e.At, TokenName: e.TokenName, Owner: e.Owner,
			Action: e.Action, Resource: e.Resource, Outcome: e.Outcome, Detail: e.Detail})
		out.NextAfter = e.Seq
	}
	api.WriteJSON(w, http.StatusOK, out)
}
