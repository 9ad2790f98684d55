package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout: the engine did not answer within the daemon's engine timeout.
var ErrTimeout = errors.New("container engine did not answer in time")

// Timed bounds every call of a Driver by a time limit, so that an engine that
// stops answering fails requests, sweeps and start-up in bounded time instead
// of stalling them. Stop gets its grace period on top of the limit. The event
// stream is long-lived by design and is not bounded.
type Timed struct {
	D       Driver
	Timeout time.Duration
}

var _ Driver = (*Timed)(nil)

// WithTimeout wraps d; a limit <= 0 returns d unchanged.
func WithTimeout(d Driver, limit time.Duration) Driver {
	if limit <= 0 {
		return d
	}
	return &Timed{D: d, Timeout: limit}
}

// call runs fn under the limit and names a hit limit ErrTimeout, while a
// caller's own cancellation keeps its error.
func call[T any](ctx context.Context, limit time.Duration, op string, fn func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	v, err := fn(cctx)
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return v, fmt.Errorf("%s: %w after %s", op, ErrTimeout, limit)
	}
	return v, err
}

func call0(ctx context.Context, limit time.Duration, op string, fn func(context.Context) error) error {
	_, err := call(ctx, limit, op, func(c context.Context) (struct{}, error) { return struct{}{}, fn(c) })
	return err
}

func (t *Timed) Create(ctx context.Context, spec Spec) (string, error) {
	return call(ctx, t.Timeout, "create", func(c context.Context) (string, error) { return t.D.Create(c, spec) })
}

func (t *Timed) Start(ctx context.Context, id string) error {
	return call0(ctx, t.Timeout, "start", func(c context.Context) error { return t.D.Start(c, id) })
}

func (t *Timed) Stop(ctx context.Context, id string, grace time.Duration) error {
	return call0(ctx, t.Timeout+grace, "stop", func(c context.Context) error { return t.D.Stop(c, id, grace) })
}

func (t *Timed) Remove(ctx context.Context, id string) error {
	return call0(ctx, t.Timeout, "remove", func(c context.Context) error { return t.D.Remove(c, id) })
}

func (t *Timed) Inspect(ctx context.Context, id string) (Container, error) {
	return call(ctx, t.Timeout, "inspect", func(c context.Context) (Container, error) { return t.D.Inspect(c, id) })
}

func (t *Timed) Output(ctx context.Context, id string, tail int) (string, error) {
	return call(ctx, t.Timeout, "output", func(c context.Context) (string, error) { return t.D.Output(c, id, tail) })
}

func (t *Timed) List(ctx context.Context, labels map[string]string) ([]Container, error) {
	return call(ctx, t.Timeout, "list", func(c context.Context) ([]Container, error) { return t.D.List(c, labels) })
}

func (t *Timed) Pause(ctx context.Context, id string) error {
	return call0(ctx, t.Timeout, "pause", func(c context.Context) error { return t.D.Pause(c, id) })
}

func (t *Timed) Unpause(ctx context.Context, id string) error {
	return call0(ctx, t.Timeout, "unpause", func(c context.Context) error { return t.D.Unpause(c, id) })
}

func (t *Timed) Update(ctx context.Context, id string, cpu float64, memoryMB int64) error {
	return call0(ctx, t.Timeout, "update", func(c context.Context) error { return t.D.Update(c, id, cpu, memoryMB) })
}

func (t *Timed) Stats(ctx context.Context, id string) (Stats, error) {
	return call(ctx, t.Timeout, "stats", func(c context.Context) (Stats, error) { return t.D.Stats(c, id) })
}

func (t *Timed) DiskUsage(ctx context.Context, id string) (int64, error) {
	return call(ctx, t.Timeout, "disk usage", func(c context.Context) (int64, error) { return t.D.DiskUsage(c, id) })
}

func (t *Timed) Events(ctx context.Context, labels map[string]string) (<-chan Event, <-chan error) {
	return t.D.Events(ctx, labels)
}
