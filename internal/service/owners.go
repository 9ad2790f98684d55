package service

import (
	"context"
	"fmt"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// sandbox returns the sandbox with the id if the caller in ctx may see it,
// else ErrNotFound. Every operation on an existing sandbox starts here, which
// is what scopes the facades by owner.
func (s *Service) sandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	if !identity.Visible(identity.Of(ctx), sb.Owner) {
		return sandpit.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, sandpit.ErrNotFound)
	}
	return sb, nil
}

// scopeList narrows a listing to the caller's own sandboxes unless it is an
// admin.
func scopeList(ctx context.Context, opts sandpit.ListOptions) sandpit.ListOptions {
	if p := identity.Of(ctx); !p.Admin {
		opts.Owner = p.Owner
	}
	return opts
}

// audit appends an entry for an operation the caller in ctx attempted.
func (s *Service) audit(ctx context.Context, action, resource string, opErr error) {
	identity.Audit{Store: s.store, Log: s.log, Now: s.now}.Record(ctx, action, resource, opErr)
}
