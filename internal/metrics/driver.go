package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/sandpit-dev/sandpit/internal/driver"
)

// instrumented is a driver.Driver that times every call of the one it wraps
// and counts its failures.
type instrumented struct {
	d driver.Driver
	m *Metrics
}

var _ driver.Driver = (*instrumented)(nil)

// Driver wraps d so each engine call is timed and its failures counted. On a
// nil *Metrics it returns d itself.
func (m *Metrics) Driver(d driver.Driver) driver.Driver {
	if m == nil {
		return d
	}
	return &instrumented{d: d, m: m}
}

// observe records one call. A missing container is the engine's answer to a
// question (inspect, remove of what is already gone), and a cancelled
// context is the caller giving up; neither is an engine failure.
func (i *instrumented) observe(op string, start time.Time, err error) {
	i.m.engineSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, driver.ErrNotFound) && !errors.Is(err, context.Canceled) {
		i.m.engineErrors.WithLabelValues(op).Inc()
	}
}

func (i *instrumented) Create(ctx context.Context, spec driver.Spec) (_ string, err error) {
	defer func(t time.Time) { i.observe("create", t, err) }(time.Now())
	return i.d.Create(ctx, spec)
}

func (i *instrumented) Start(ctx context.Context, id string) (err error) {
	defer func(t time.Time) { i.observe("start", t, err) }(time.Now())
	return i.d.Start(ctx, id)
}

func (i *instrumented) Stop(ctx context.Context, id string, timeout time.Duration) (err error) {
	defer func(t time.Time) { i.observe("stop", t, err) }(time.Now())
	return i.d.Stop(ctx, id, timeout)
}

func (i *instrumented) Remove(ctx context.Context, id string) (err error) {
	defer func(t time.Time) { i.observe("remove", t, err) }(time.Now())
	return i.d.Remove(ctx, id)
}

func (i *instrumented) Inspect(ctx context.Context, id string) (_ driver.Container, err error) {
	defer func(t time.Time) { i.observe("inspect", t, err) }(time.Now())
	return i.d.Inspect(ctx, id)
}

func (i *instrumented) Output(ctx context.Context, id string, tail int) (_ string, err error) {
	defer func(t time.Time) { i.observe("output", t, err) }(time.Now())
	return i.d.Output(ctx, id, tail)
}

func (i *instrumented) List(ctx context.Context, labels map[string]string) (_ []driver.Container, err error) {
	defer func(t time.Time) { i.observe("list", t, err) }(time.Now())
	return i.d.List(ctx, labels)
}

func (i *instrumented) Pause(ctx context.Context, id string) (err error) {
	defer func(t time.Time) { i.observe("pause", t, err) }(time.Now())
	return i.d.Pause(ctx, id)
}

func (i *instrumented) Unpause(ctx context.Context, id string) (err error) {
	defer func(t time.Time) { i.observe("unpause", t, err) }(time.Now())
	return i.d.Unpause(ctx, id)
}

func (i *instrumented) Update(ctx context.Context, id string, cpu float64, memoryMB int64) (err error) {
	defer func(t time.Time) { i.observe("update", t, err) }(time.Now())
	return i.d.Update(ctx, id, cpu, memoryMB)
}

func (i *instrumented) Stats(ctx context.Context, id string) (_ driver.Stats, err error) {
	defer func(t time.Time) { i.observe("stats", t, err) }(time.Now())
	return i.d.Stats(ctx, id)
}

func (i *instrumented) DiskUsage(ctx context.Context, id string) (_ int64, err error) {
	defer func(t time.Time) { i.observe("disk_usage", t, err) }(time.Now())
	return i.d.DiskUsage(ctx, id)
}

// Events is not timed: the stream lasts as long as the daemon, and its
// failures arrive on the error channel, which the watcher reports.
func (i *instrumented) Events(ctx context.Context, labels map[string]string) (<-chan driver.Event, <-chan error) {
	return i.d.Events(ctx, labels)
}
