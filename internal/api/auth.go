package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// Auth turns a presented credential into the principal a request acts as.
// The daemon's own token (<data-dir>/token or SANDPIT_TOKEN) is the admin;
// any other credential must be a live personal access token. Every surface
// (native API, E2B, Daytona, their event sockets) authenticates through it,
// and puts the principal in the request's context, where the service reads
// the owner from.
type Auth struct {
	admin string
	// ids resolves personal access tokens and registers the sessions
	// opened with them; nil accepts the admin token only and registers
	// nothing (unit tests of a facade over a fake backend).
	ids *identity.Service
}

// NewAuth builds the authenticator.
func NewAuth(ids *identity.Service, adminToken string) *Auth {
	return &Auth{admin: adminToken, ids: ids}
}

// OpenSession registers a long-lived session (an event stream, a socket, a
// terminal) of the credential the request in ctx authenticated with; see
// identity.Service.OpenSession. Every surface opens its streams here, where
// the credential was resolved, so that revoking it ends them.
func (a *Auth) OpenSession(ctx context.Context) (context.Context, func(), error) {
	return a.ids.OpenSession(ctx)
}

// AdminPrincipal is the principal of the daemon's own token.
func AdminPrincipal() sandpit.Principal {
	return sandpit.Principal{TokenName: "admin", Owner: sandpit.AdminOwner, Scopes: []string{sandpit.ScopeAdmin}, Admin: true}
}

// Principal resolves a presented credential. The admin token is compared in
// constant time; a personal access token is found by its public prefix and
// its hash compared in constant time. Failures wrap sandpit.ErrUnauthorized
// and never quote the credential.
func (a *Auth) Principal(ctx context.Context, presented string) (sandpit.Principal, error) {
	// A request another node of the cluster forwarded over the cluster port
	// was authenticated there; it acts as the principal that node found.
	if p, ok := cluster.Forwarded(ctx); ok {
		return p, nil
	}
	if presented == "" {
		return sandpit.Principal{}, fmt.Errorf("%w: no token presented", sandpit.ErrUnauthorized)
	}
	if TokenEqual(presented, a.admin) {
		return AdminPrincipal(), nil
	}
	if a.ids == nil {
		return sandpit.Principal{}, sandpit.ErrUnauthorized
	}
	return a.ids.AuthenticateToken(ctx, presented)
}

// Authorize authenticates presented for r and returns r with the principal
// in its context. It decides nothing about scopes: each route declares its
// action (Routes.Handle) and is checked against the principal when it is
// matched, since the method alone does not say what a route does.
func (a *Auth) Authorize(r *http.Request, presented string) (*http.Request, error) {
	p, err := a.Principal(r.Context(), presented)
	if err != nil {
		return r, err
	}
	return r.WithContext(sandpit.WithPrincipal(r.Context(), p)), nil
}
