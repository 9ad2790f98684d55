package v1

import (
	"context"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// IDFromContext returns the id a keyed create is to make its resource under,
// or "" for a request without an Idempotency-Key. The Idempotency-Key layer
// chooses the id and records it in its claim before any side effect, so a
// retry of a crashed attempt reuses it.
func IDFromContext(ctx context.Context) string { return api.TargetID(ctx) }
