package v1

import (
	"net/http"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api"
)

// Surface is a mounted surface's route list, for GET /v1/scopes.
type Surface struct {
	Mount  string
	Routes []api.Route
}

// AddSurface makes GET /v1/scopes list another surface's routes (the
// facades are built after this handler).
func (h *Handler) AddSurface(s Surface) { h.surfaces = append(h.surfaces, s) }

// scopes answers the scope table: which actions each scope allows and which
// action each route performs. It is no secret, so any valid token reads it.
func (h *Handler) scopes(w http.ResponseWriter, _ *http.Request) {
	out := apitypes.ScopeTable{}
	for _, sc := range []string{sandpit.ScopeSandboxesRead, sandpit.ScopeSandboxesWrite, sandpit.ScopeAdmin} {
		sa := apitypes.ScopeActions{Scope: sc, Actions: []string{}}
		for _, a := range sandpit.Actions() {
			if sandpit.ScopeGrants(sc, a) {
				sa.Actions = append(sa.Actions, string(a))
			}
		}
		out.Scopes = append(out.Scopes, sa)
	}
	for _, s := range append([]Surface{{Mount: "/v1", Routes: h.routes.List()}}, h.surfaces...) {
		for _, rt := range s.Routes {
			out.Routes = append(out.Routes, apitypes.RouteAction{Surface: s.Mount, Pattern: rt.Pattern, Action: string(rt.Action), Note: rt.Note})
		}
	}
	api.WriteJSON(w, http.StatusOK, out)
}
