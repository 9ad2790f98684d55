package service_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// TestEveryTransitionPublishesOneEvent drives each state change of a sandbox
// on the real engine (create, stop, start, pause, resume, reconcile finding
// its container gone, delete) and requires exactly one event per change, of
// the change's type and with the sandbox's new state.
func TestEveryTransitionPublishesOneEvent(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	sub := r.svc.Events().Subscribe(64)
	defer sub.Close()
	var id string
	// drained returns the events published so far; publishing is
	// synchronous with the change, so none is still on its way.
	drained := func() []events.Event {
		var got []events.Event
		for {
			select {
			case e := <-sub.C():
				got = append(got, e)
			case <-time.After(200 * time.Millisecond):
				return got
			}
		}
	}
	steps := []struct {
		name  string
		do    func() error
		typ   events.Type
		old   sandpit.State
		state sandpit.State
	}{
		{"create", func() error {
			sb, err := r.svc.CreateSandbox(ctx, service.CreateRequest{})
			id = sb.ID
			return err
		}, events.Created, sandpit.StateCreating, sandpit.StateRunning},
		{"stop", func() error { _, err := r.svc.StopSandbox(ctx, id); return err }, events.Stopped, sandpit.StateRunning, sandpit.StateStopped},
		{"start", func() error { _, err := r.svc.StartSandbox(ctx, id); return err }, events.Started, sandpit.StateStopped, sandpit.StateRunning},
		{"pause", func() error { _, err := r.svc.PauseSandbox(ctx, id, sandpit.PauseMemory); return err }, events.Paused, sandpit.StateRunning, sandpit.StatePaused},
		{"resume", func() error { _, err := r.svc.ResumeSandbox(ctx, id); return err }, events.Resumed, sandpit.StatePaused, sandpit.StateRunning},
		{"reconcile: container gone", func() error {
			sb, err := r.st.GetSandbox(ctx, id)
			if err != nil {
				return err
			}
			// Removed behind the daemon's back, as by an operator.
			if out, err := exec.Command("docker", "rm", "-f", sb.ContainerID).CombinedOutput(); err != nil {
				t.Fatalf("docker rm: %v %s", err, out)
			}
			return r.svc.Reconcile(ctx)
		}, events.Died, sandpit.StateRunning, sandpit.StateError},
		{"delete", func() error { return r.svc.DeleteSandbox(ctx, id) }, events.Deleted, sandpit.StateError, sandpit.StateError},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := drained()
		if len(got) != 1 {
			t.Fatalf("%s: %d events %+v, want exactly one", st.name, len(got), got)
		}
		e := got[0]
		if e.Type != st.typ || e.Sandbox.ID != id || e.OldState != st.old || e.Sandbox.State != st.state {
			t.Fatalf("%s: event %s of %s %s -> %s, want %s %s -> %s", st.name, e.Type, e.Sandbox.ID, e.OldState, e.Sandbox.State, st.typ, st.old, st.state)
		}
	}
}
