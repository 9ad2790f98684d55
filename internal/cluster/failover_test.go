package cluster

import (
	"errors"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

// TestFSMFailover drives the failover operations through Apply and checks
// each placement's owner and state afterwards.
func TestFSMFailover(t *testing.T) {
	spec := []byte(`{"image":"img"}`)
	setup := []command{
		{Op: opReserve, At: t0, SandboxID: "a", Name: "web", Node: "n3", Place: true},
		{Op: opReserve, At: t0, SandboxID: "b", Node: "n3", Place: true},
		{Op: opReserve, At: t0, SandboxID: "c", Node: "n1", Place: true},
		{Op: opSetSpec, At: t0, SandboxID: "a", Node: "n3", Spec: spec},
	}
	type want struct{ node, state string }
	tests := []struct {
		name  string
		cmds  []command
		errs  []error // per command after setup; nil entries expect success
		after map[string]want
		names map[string]string
	}{
		{
			name:  "orphan makes the dead node's sandboxes lost and keeps their names",
			cmds:  []command{{Op: opFailNode, At: t0, Node: "n1", Failed: "n3"}},
			errs:  []error{nil},
			after: map[string]want{"a": {"n3", PlacementLost}, "b": {"n3", PlacementLost}, "c": {"n1", PlacementPlaced}},
			names: map[string]string{"web": "a"},
		},
		{
			name: "recreate moves what has a spec; the rest is lost",
			cmds: []command{{Op: opFailNode, At: t0, Node: "n1", Failed: "n3", Targets: map[string]string{"a": "n2", "b": "n2"}}},
			errs: []error{nil},
			// b has no spec, so nobody could make it again.
			after: map[string]want{"a": {"n2", PlacementRecreating}, "b": {"n3", PlacementLost}},
			names: map[string]string{"web": "a"},
		},
		{
			name: "only the target completes a re-creation",
			cmds: []command{
				{Op: opFailNode, At: t0, Node: "n1", Failed: "n3", Targets: map[string]string{"a": "n2"}},
				{Op: opRecreated, At: t0, SandboxID: "a", Node: "n3"},
				{Op: opRecreated, At: t0, SandboxID: "a", Node: "n2"},
				{Op: opRecreated, At: t0, SandboxID: "a", Node: "n2"}, // a retry
			},
			errs:  []error{nil, sandpit.ErrNotFound, nil, nil},
			after: map[string]want{"a": {"n2", PlacementPlaced}},
		},
		{
			name: "a stale owner can neither rewrite the spec nor free the moved sandbox",
			cmds: []command{
				{Op: opFailNode, At: t0, Node: "n1", Failed: "n3", Targets: map[string]string{"a": "n2"}},
				{Op: opSetSpec, At: t0, SandboxID: "a", Node: "n3", Spec: []byte(`{}`)},
				{Op: opRelease, At: t0, SandboxID: "a", Node: "n3"},
			},
			errs:  []error{nil, sandpit.ErrNotFound, nil},
			after: map[string]want{"a": {"n2", PlacementRecreating}},
			names: map[string]string{"web": "a"},
		},
		{
			name:  "the owner's release frees the name",
			cmds:  []command{{Op: opRelease, At: t0, SandboxID: "a", Node: "n3"}},
			errs:  []error{nil},
			names: map[string]string{},
		},
		{
			name: "a node back takes its lost sandboxes back",
			cmds: []command{
				{Op: opFailNode, At: t0, Node: "n1", Failed: "n3"},
				{Op: opDelete, At: t0, SandboxID: "b"}, // deleted while lost
				{Op: opReclaim, At: t0, Node: "n3"},
			},
			errs:  []error{nil, nil, nil},
			after: map[string]want{"a": {"n3", PlacementPlaced}},
		},
		{
			name: "deleting a lost sandbox frees its name for a new create",
			cmds: []command{
				{Op: opFailNode, At: t0, Node: "n1", Failed: "n3"},
				{Op: opReserve, At: t0, SandboxID: "d", Name: "web", Node: "n1", Place: true},
				{Op: opDelete, At: t0, SandboxID: "a"},
				{Op: opReserve, At: t0, SandboxID: "d", Name: "web", Node: "n1", Place: true},
			},
			errs:  []error{nil, sandpit.ErrNameConflict, nil, nil},
			after: map[string]want{"d": {"n1", PlacementPlaced}},
			names: map[string]string{"web": "d"},
		},
		{
			name: "a fail_node without its node is refused",
			cmds: []command{{Op: opFailNode, At: t0, Node: "n1"}},
			errs: []error{ErrInvalidCommand},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewFSM(), NewFSM()
			for _, f := range []*FSM{a, b} {
				for i, r := range applyAll(t, f, setup...) {
					if r.Err != nil {
						t.Fatalf("setup %d: %v", i, r.Err)
					}
				}
			}
			res := applyAll(t, a, tc.cmds...)
			applyAll(t, b, tc.cmds...)
			for i, r := range res {
				if (tc.errs[i] == nil) != (r.Err == nil) || (tc.errs[i] != nil && !errors.Is(r.Err, tc.errs[i])) {
					t.Errorf("command %d (%s): err %v, want %v", i, tc.cmds[i].Op, r.Err, tc.errs[i])
				}
			}
			for id, w := range tc.after {
				p, ok := a.Placement(id)
				if !ok || p.Node != w.node || p.State != w.state {
					t.Errorf("placement %s = %+v (found %v), want node %s state %s", id, p, ok, w.node, w.state)
				}
			}
			for name, id := range tc.names {
				if p, ok := a.PlacementByName(name); !ok || p.SandboxID != id {
					t.Errorf("name %s held by %+v (found %v), want %s", name, p, ok, id)
				}
			}
			if tc.names != nil && len(tc.names) == 0 {
				if _, ok := a.PlacementByName("web"); ok {
					t.Errorf("name web still held")
				}
			}
			// Apply reads only the entry: two replicas of the same log agree.
			if a.Digest() != b.Digest() {
				t.Errorf("digests differ after the same log")
			}
		})
	}
}
