package cluster

import (
	"errors"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func TestFSMDrainAndCapacity(t *testing.T) {
	reg := func(id string, max int) command {
		return command{Op: opRegisterNode, At: t0, NodeInfo: &Node{ID: id, APIAddr: id + ":1", RaftAddr: id + ":2", MaxSandboxes: max}}
	}
	place := func(id, node string) command {
		return command{Op: opReserve, At: t0, SandboxID: id, Node: node, Place: true}
	}
	tests := []struct {
		name string
		cmds []command
		want []error // per command
	}{
		{
			name: "a node takes placements up to its ceiling, then none",
			cmds: []command{reg("n1", 2), place("a", "n1"), place("b", "n1"), place("c", "n1"), place("c", "n2")},
			want: []error{nil, nil, nil, sandpit.ErrNoCapacity, nil},
		},
		{
			name: "a retry of a placement already made is not a new one",
			cmds: []command{reg("n1", 1), place("a", "n1"), place("a", "n1")},
			want: []error{nil, nil, nil},
		},
		{
			name: "a refused reservation does not take its name",
			cmds: []command{reg("n1", 1), place("a", "n1"),
				{Op: opReserve, At: t0, SandboxID: "b", Name: "web", Node: "n1", Place: true},
				{Op: opReserve, At: t0, SandboxID: "c", Name: "web", Node: "n2", Place: true}},
			want: []error{nil, nil, sandpit.ErrNoCapacity, nil},
		},
		{
			name: "a delete makes room",
			cmds: []command{reg("n1", 1), place("a", "n1"), {Op: opDelete, At: t0, SandboxID: "a"}, place("b", "n1")},
			want: []error{nil, nil, nil, nil},
		},
		{
			name: "placing a reservation counts too",
			cmds: []command{reg("n1", 1), place("a", "n1"),
				{Op: opReserve, At: t0, SandboxID: "b"},
				{Op: opPlace, At: t0, SandboxID: "b", Node: "n1"},
				{Op: opPlace, At: t0, SandboxID: "b", Node: "n2"}},
			want: []error{nil, nil, nil, sandpit.ErrNoCapacity, nil},
		},
		{
			name: "a drained node takes nothing new; undrained it does",
			cmds: []command{reg("n1", 0), place("a", "n1"),
				{Op: opSetDrain, At: t0, Node: "n1", Drain: true},
				place("b", "n1"),
				reg("n1", 0), // re-registration keeps the flag
				place("b", "n1"),
				{Op: opSetDrain, At: t0, Node: "n1", Drain: false},
				place("b", "n1")},
			want: []error{nil, nil, nil, sandpit.ErrNoCapacity, nil, sandpit.ErrNoCapacity, nil, nil},
		},
		{
			name: "a member drained before its registration stays drained",
			cmds: []command{{Op: opSetDrain, At: t0, Node: "n9", Drain: true}, reg("n9", 0), place("a", "n9")},
			want: []error{nil, nil, sandpit.ErrNoCapacity},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFSM()
			res := applyAll(t, f, tc.cmds...)
			for i, r := range res {
				if (tc.want[i] == nil) != (r.Err == nil) || tc.want[i] != nil && !errors.Is(r.Err, tc.want[i]) {
					t.Fatalf("command %d (%s): got %v, want %v", i, tc.cmds[i].Op, r.Err, tc.want[i])
				}
			}
		})
	}
}

// The refusal crosses a forwarded apply as its code and decodes to the same
// sentinel, so a follower's create maps it to 503 like the leader's.
func TestNoCapacityCrossesTheWire(t *testing.T) {
	if code := errCode(sandpit.ErrNoCapacity); code != "no_capacity" || !errors.Is(errCodes[code], sandpit.ErrNoCapacity) {
		t.Fatalf("code %q", code)
	}
}
