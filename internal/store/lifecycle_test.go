package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// TestLifecycleDue: a running sandbox is due for auto-stop once idle for its
// interval (activity defers it), a stopped one for auto-delete once stopped
// for its interval; AutoDeleteNever and AutoStop 0 are never due.
func TestLifecycleDue(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t)
	unit := time.Second
	mk := func(id string, state sandpit.State, stop, del int) {
		t.Helper()
		sb := sandpit.Sandbox{ID: id, State: state, CreatedAt: t0, AutoStop: stop, AutoDelete: del}
		if err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	mk("idle", sandpit.StateRunning, 5, sandpit.AutoDeleteNever)
	mk("busy", sandpit.StateRunning, 5, sandpit.AutoDeleteNever)
	mk("forever", sandpit.StateRunning, 0, sandpit.AutoDeleteNever)
	mk("ephemeral", sandpit.StateRunning, 0, 0)
	mk("later", sandpit.StateRunning, 0, 10)
	mk("kept", sandpit.StateRunning, 0, sandpit.AutoDeleteNever)
	if err := s.TouchSandbox(ctx, "busy", t0.Add(4*unit)); err != nil {
		t.Fatal(err)
	}
	// Touches never move activity backwards.
	if err := s.TouchSandbox(ctx, "busy", t0.Add(1*unit)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ephemeral", "later", "kept"} {
		if err := s.UpdateSandboxState(ctx, id, sandpit.StateStopped, t0.Add(2*unit)); err != nil {
			t.Fatal(err)
		}
	}
	due := func(at time.Duration) map[string]bool {
		t.Helper()
		list, err := s.ListLifecycleDue(ctx, t0.Add(at), unit)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, sb := range list {
			out[sb.ID] = true
		}
		return out
	}
	for _, tc := range []struct {
		at   time.Duration
		want []string
	}{
		{1 * unit, nil},
		{2 * unit, []string{"ephemeral"}},
		{5 * unit, []string{"ephemeral", "idle"}},
		{9 * unit, []string{"ephemeral", "idle", "busy"}},
		{12 * unit, []string{"ephemeral", "idle", "busy", "later"}},
	} {
		got := due(tc.at)
		if len(got) != len(tc.want) {
			t.Errorf("at +%s: due %v, want %v", tc.at, got, tc.want)
			continue
		}
		for _, id := range tc.want {
			if !got[id] {
				t.Errorf("at +%s: due %v, want %v", tc.at, got, tc.want)
			}
		}
	}

	// Starting clears the stop time and counts as activity.
	if err := s.UpdateSandboxState(ctx, "later", sandpit.StateRunning, t0.Add(20*unit)); err != nil {
		t.Fatal(err)
	}
	sb, err := s.GetSandbox(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	if !sb.StoppedAt.IsZero() || !sb.LastActivityAt.Equal(t0.Add(20*unit)) {
		t.Errorf("after start: stopped_at %v, last activity %v", sb.StoppedAt, sb.LastActivityAt)
	}
}

// TestSetSandboxInterval: the intervals are stored and read back; the
// schema refuses values below their floor.
func TestSetSandboxInterval(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t)
	createSandbox(t, s, "sb", "")
	for _, tc := range []struct {
		which sandpit.Interval
		v     int
		ok    bool
	}{
		{sandpit.IntervalAutoStop, 15, true},
		{sandpit.IntervalAutoArchive, 60, true},
		{sandpit.IntervalAutoDelete, -1, true},
		{sandpit.IntervalAutoDelete, 0, true},
		{sandpit.IntervalAutoStop, -1, false},
		{sandpit.IntervalAutoDelete, -2, false},
		{sandpit.Interval("bogus"), 1, false},
	} {
		err := s.SetSandboxInterval(ctx, "sb", tc.which, tc.v, t0)
		if (err == nil) != tc.ok {
			t.Errorf("%s=%d: err %v, want ok=%v", tc.which, tc.v, err, tc.ok)
		}
	}
	sb, err := s.GetSandbox(ctx, "sb")
	if err != nil {
		t.Fatal(err)
	}
	if sb.AutoStop != 15 || sb.AutoArchive != 60 || sb.AutoDelete != 0 {
		t.Errorf("read back %d/%d/%d", sb.AutoStop, sb.AutoArchive, sb.AutoDelete)
	}
	if err := s.SetSandboxInterval(ctx, "missing", sandpit.IntervalAutoStop, 1, t0); err == nil {
		t.Error("setting an interval of a missing sandbox succeeded")
	}
}
