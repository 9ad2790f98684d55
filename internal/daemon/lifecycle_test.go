package daemon

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// recorder makes components that note their starts and stops.
type recorder struct{ log []string }

func (r *recorder) component(name string, fail error, stops bool) component {
	c := component{name: name, start: func(context.Context) error {
		r.log = append(r.log, "start "+name)
		return fail
	}}
	if stops {
		c.stop = func(context.Context) { r.log = append(r.log, "stop "+name) }
	}
	return c
}

// TestStartAllUnwinds: a start that fails stops exactly the components
// started before it, in the reverse order, and starts none after it; a
// start that succeeds returns the shutdown, which stops every component in
// the reverse order.
func TestStartAllUnwinds(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		failAt  string
		wantErr error
		want    []string
	}{
		{"C fails", "C", boom, []string{"start A", "start B", "start C", "stop B", "stop A"}},
		{"A fails", "A", boom, []string{"start A"}},
		{"none fails, then the shutdown", "", nil, []string{"start A", "start B", "start C", "start D", "stop D", "stop C", "stop B", "stop A"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			var cs []component
			for _, n := range []string{"A", "B", "C", "D"} {
				var err error
				if n == tc.failAt {
					err = boom
				}
				cs = append(cs, r.component(n, err, true))
			}
			stop, err := startAll(context.Background(), cs)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("startAll = %v, want %v", err, tc.wantErr)
			}
			if err == nil {
				stop(context.Background())
			} else if stop != nil {
				t.Fatal("a failed start returned a shutdown to call")
			}
			if !slices.Equal(r.log, tc.want) {
				t.Fatalf("ran %q\nwant %q", r.log, tc.want)
			}
		})
	}
}

// TestStartAllSkipsComponentsWithoutStop: a component with nothing to undo
// is passed over by the unwinding, and the error is the failing start's own.
func TestStartAllSkipsComponentsWithoutStop(t *testing.T) {
	r := &recorder{}
	boom := errors.New("listen 127.0.0.1:1: address already in use")
	_, err := startAll(context.Background(), []component{
		r.component("A", nil, true),
		r.component("B", nil, false),
		r.component("C", boom, true),
	})
	if err != boom {
		t.Fatalf("startAll = %v, want the failing start's error as it is", err)
	}
	if want := []string{"start A", "start B", "start C", "stop A"}; !slices.Equal(r.log, want) {
		t.Fatalf("ran %q\nwant %q", r.log, want)
	}
}

// TestStartAllStopsWithoutCancel: the unwinding after a failed start runs
// on a context that is not cancelled, even when the start's was (a signal
// during the start), so that its network and firewall teardown still runs.
func TestStartAllStopsWithoutCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stopErr error = errors.New("stop not run")
	_, err := startAll(ctx, []component{
		{name: "A", start: func(context.Context) error { return nil }, stop: func(ctx context.Context) { stopErr = ctx.Err() }},
		{name: "B", start: func(context.Context) error { cancel(); return context.Canceled }},
	})
	if !errors.Is(err, context.Canceled) || stopErr != nil {
		t.Fatalf("startAll = %v; A's stop saw %v, want a live context", err, stopErr)
	}
}

// TestComponentOrder pins the order of the daemon's components, which is
// the shutdown's read backwards (see components): HTTP drained before the
// loops and the service are waited for, those before the cluster, the
// router and the network go, the router before the network, the store after
// everything that writes to it, the engine client last.
func TestComponentOrder(t *testing.T) {
	var names []string
	for _, c := range (&daemon{}).components() {
		names = append(names, c.name)
	}
	want := []string{"engine", "sandbox defaults", "store", "previous run's claims", "secrets", "listeners",
		"sandbox network", "router", "cluster", "service", "reconcile", "handlers", "background loops", "ssh", "http"}
	if !slices.Equal(names, want) {
		t.Fatalf("components %q\nwant %q", names, want)
	}
}
