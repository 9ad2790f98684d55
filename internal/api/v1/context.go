package v1

import "context"

type ctxKey int

const idKey ctxKey = 1

// WithID returns a context that tells the create handler which sandbox id to
// use. The Idempotency-Key layer chooses the id and records it in its claim
// before any side effect, so a retry of a crashed attempt reuses it.
func WithID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, idKey, id)
}

// IDFromContext returns the id set by WithID, or "".
func IDFromContext(ctx context.Context) string {
	id, _ := ctx.Value(idKey).(string)
	return id
}
