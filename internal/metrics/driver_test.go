package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/metrics"
)

// failingDriver injects the engine failures a healthy engine will not
// produce on demand; only the methods the test calls are implemented.
type failingDriver struct{ driver.Driver }

func (failingDriver) Create(context.Context, driver.Spec) (string, error) {
	return "", errors.New("engine is down")
}

func (failingDriver) Inspect(context.Context, string) (driver.Container, error) {
	return driver.Container{}, fmt.Errorf("inspect: %w", driver.ErrNotFound)
}

func (failingDriver) Start(context.Context, string) error { return nil }

func (failingDriver) Stop(ctx context.Context, _ string, _ time.Duration) error { return ctx.Err() }

func series(t *testing.T, m *metrics.Metrics, name, op string) (count float64) {
	t.Helper()
	fams, err := m.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					if s.Histogram != nil {
						count += float64(s.GetHistogram().GetSampleCount())
					} else {
						count += s.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return count
}

// TestDriverWrapper: every call is timed; a failure counts as an engine
// error, but a missing container and a caller that gave up do not.
func TestDriverWrapper(t *testing.T) {
	m := metrics.New()
	d := m.Driver(failingDriver{})
	ctx := context.Background()
	if _, err := d.Create(ctx, driver.Spec{}); err == nil {
		t.Fatal("create succeeded")
	}
	if _, err := d.Inspect(ctx, "x"); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("inspect: %v, want ErrNotFound passed through", err)
	}
	_ = d.Start(ctx, "x")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_ = d.Stop(cancelled, "x", time.Second)
	for _, tc := range []struct {
		op            string
		calls, errors float64
	}{
		{"create", 1, 1},
		{"inspect", 1, 0},
		{"start", 1, 0},
		{"stop", 1, 0},
	} {
		if got := series(t, m, "sandpit_engine_call_duration_seconds", tc.op); got != tc.calls {
			t.Errorf("%s calls = %v, want %v", tc.op, got, tc.calls)
		}
		if got := series(t, m, "sandpit_engine_call_errors_total", tc.op); got != tc.errors {
			t.Errorf("%s errors = %v, want %v", tc.op, got, tc.errors)
		}
	}
	var nilMetrics *metrics.Metrics
	if nilMetrics.Driver(failingDriver{}) == nil {
		t.Fatal("a nil *Metrics must hand the driver back")
	}
}
