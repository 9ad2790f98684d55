package identity

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

// Audit appends what each principal attempted to the store's audit log.
type Audit struct {
	Store *store.Store
	Log   *slog.Logger
	Now   func() time.Time
}

// Record appends an entry for an operation the caller in ctx attempted. A
// failure to write it is logged and does not fail the operation, which has
// already happened.
func (a Audit) Record(ctx context.Context, action, resource string, opErr error) {
	p := Of(ctx)
	e := sandpit.AuditEntry{At: a.Now(), TokenName: p.TokenName, Owner: p.Owner, Action: action, Resource: resource, Outcome: "ok"}
	if opErr != nil {
		e.Outcome = outcomeOf(opErr)
		e.Detail = opErr.Error()
		if len(e.Detail) > 300 {
			e.Detail = e.Detail[:300]
		}
	}
	if err := a.Store.AppendAudit(context.WithoutCancel(ctx), e); err != nil {
		a.Log.Error("append audit entry", "action", action, "resource", resource, "err", err)
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
	case errors.Is(err, sandpit.ErrInvalid):
		return "invalid"
	case errors.Is(err, sandpit.ErrForbidden):
		return "forbidden"
	}
	return "error"
}
