package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/idempotency"
)

// ErrUnauthorized is a request whose credential is missing, unknown, revoked
// or expired; ErrForbidden is a valid credential without the scope an
// operation needs.
var (
	ErrUnauthorized = errors.New("missing or invalid token")
	ErrForbidden    = errors.New("token lacks the scope for this operation")
)

// systemPrincipal is the daemon acting for itself (the expiry sweeper,
// reconcile): it sees every owner's sandboxes.
func systemPrincipal() sandpit.Principal {
	return sandpit.Principal{TokenName: "system", Owner: sandpit.AdminOwner, Admin: true}
}

// principalOf returns the principal a request acts as; a context that carries
// none is the daemon itself.
func principalOf(ctx context.Context) sandpit.Principal {
	if p, ok := sandpit.PrincipalFrom(ctx); ok {
		return p
	}
	return systemPrincipal()
}

// ownerOf is the owner that what ctx creates will belong to.
func ownerOf(ctx context.Context) string {
	if o := principalOf(ctx).Owner; o != "" {
		return o
	}
	return sandpit.AdminOwner
}

// OwnerScope is the idempotency claim scope of base for the caller in ctx.
// Keys are scoped per owner, as a payment API scopes them per account: the
// same key (or E2B body fingerprint) from two owners names two requests, so
// one owner's retry can never replay another owner's response.
func OwnerScope(ctx context.Context, base string) string {
	return idempotency.OwnerScope(base, ownerOf(ctx))
}

// visibleTo reports whether the principal may see the sandbox. Another
// owner's sandbox is reported as not found, never as forbidden, so that its
// existence does not leak.
func visibleTo(p sandpit.Principal, sb sandpit.Sandbox) bool {
	return p.Admin || sb.Owner == p.Owner
}

// CanSee reports whether the caller in ctx may see the sandbox. Surfaces that
// relay the event stream use it, so one owner never hears of another's
// sandboxes.
func CanSee(ctx context.Context, sb sandpit.Sandbox) bool {
	return visibleTo(principalOf(ctx), sb)
}

// sandbox returns the sandbox with the id if the caller in ctx may see it,
// else ErrNotFound. Every operation on an existing sandbox starts here, which
// is what scopes the facades by owner.
func (s *Service) sandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	if !visibleTo(principalOf(ctx), sb) {
		return sandpit.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, sandpit.ErrNotFound)
	}
	return sb, nil
}

// scopeList narrows a listing to the caller's own sandboxes unless it is an
// admin.
func scopeList(ctx context.Context, opts sandpit.ListOptions) sandpit.ListOptions {
	if p := principalOf(ctx); !p.Admin {
		opts.Owner = p.Owner
	}
	return opts
}

// audit appends an entry for an operation the caller in ctx attempted. A
// failure to write it is logged and does not fail the operation, which has
// already happened.
func (s *Service) audit(ctx context.Context, action, resource string, opErr error) {
	p := principalOf(ctx)
	e := sandpit.AuditEntry{At: s.now(), TokenName: p.TokenName, Owner: p.Owner, Action: action, Resource: resource, Outcome: "ok"}
	if opErr != nil {
		e.Outcome = outcomeOf(opErr)
		e.Detail = opErr.Error()
		if len(e.Detail) > 300 {
			e.Detail = e.Detail[:300]
		}
	}
	if err := s.store.AppendAudit(context.WithoutCancel(ctx), e); err != nil {
		s.log.Error("append audit entry", "action", action, "resource", resource, "err", err)
	}
}

// outcomeOf names a failure's kind for the audit log.
func outcomeOf(err error) string {
	switch {
	case errors.Is(err, sandpit.ErrQuotaExceeded):
		return "quota_exceeded"
	case errors.Is(err, sandpit.ErrNotFound):
		return "not_found"
	case errors.Is(err, sandpit.ErrNameConflict), errors.Is(err, sandpit.ErrHostnameConflict):
		return "conflict"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrForbidden):
		return "forbidden"
	}
	return "error"
}
