// Package identity holds who a request acts as and what it may see: the
// principal a context carries, owner scoping, and the audit log of what
// each principal attempted. Every aggregate (sandboxes, templates, volumes)
// scopes by owner through it, so the rule is written once. Its Service is
// the identity aggregate: personal access tokens, owners and their limits,
// the audit log's reading and retention, the sessions each credential holds
// open, and the SSH keys logins present.
package identity

import (
	"context"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/idempotency"
)

// System is the daemon acting for itself (the expiry sweeper, reconcile): it
// sees every owner's resources.
func System() sandpit.Principal {
	return sandpit.Principal{TokenName: "system", Owner: sandpit.AdminOwner, Admin: true}
}

// Of returns the principal a request acts as; a context that carries none is
// the daemon itself.
func Of(ctx context.Context) sandpit.Principal {
	if p, ok := sandpit.PrincipalFrom(ctx); ok {
		return p
	}
	return System()
}

// OwnerOf is the owner that what ctx creates will belong to.
func OwnerOf(ctx context.Context) string {
	if o := Of(ctx).Owner; o != "" {
		return o
	}
	return sandpit.AdminOwner
}

// OwnerScope is the idempotency claim scope of base for the caller in ctx.
// Keys are scoped per owner, as a payment API scopes them per account: the
// same key (or E2B body fingerprint) from two owners names two requests, so
// one owner's retry can never replay another owner's response.
func OwnerScope(ctx context.Context, base string) string {
	return idempotency.OwnerScope(base, OwnerOf(ctx))
}

// Visible reports whether the principal may see what owner owns. Another
// owner's resource is reported as not found, never as forbidden, so that its
// existence does not leak.
func Visible(p sandpit.Principal, owner string) bool {
	return p.Admin || owner == p.Owner
}

// CanSee reports whether the caller in ctx may see the sandbox. Surfaces that
// relay the event stream use it, so one owner never hears of another's
// sandboxes.
func CanSee(ctx context.Context, sb sandpit.Sandbox) bool {
	return Visible(Of(ctx), sb.Owner)
}
