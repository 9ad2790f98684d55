package cluster

import (
	"errors"
	"slices"
	"testing"
	"time"

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
			name: "a target that gives up leaves the sandbox lost on no node, its name bound, and no node takes it back",
			cmds: []command{
				{Op: opFailNode, At: t0, Node: "n1", Failed: "n3", Targets: map[string]string{"a": "n2"}},
				{Op: opRecreateFailed, At: t0, SandboxID: "a", Node: "n1"}, // not its target
				{Op: opRecreateFailed, At: t0, SandboxID: "a", Node: "n2"},
				{Op: opRecreateFailed, At: t0, SandboxID: "a", Node: "n2"}, // no longer re-creating
				{Op: opRecreated, At: t0, SandboxID: "a", Node: "n2"},
				{Op: opReclaim, At: t0, Node: "n2"},
				{Op: opReclaim, At: t0, Node: "n3"},
				{Op: opReserve, At: t0, SandboxID: "d", Name: "web", Node: "n1", Place: true},
			},
			errs:  []error{nil, sandpit.ErrNotFound, nil, sandpit.ErrNotFound, sandpit.ErrNotFound, nil, nil, sandpit.ErrNameConflict},
			after: map[string]want{"a": {"", PlacementLost}},
			names: map[string]string{"web": "a"},
		},
		{
			name: "deleting a sandbox whose re-creation failed frees its name",
			cmds: []command{
				{Op: opFailNode, At: t0, Node: "n1", Failed: "n3", Targets: map[string]string{"a": "n2"}},
				{Op: opRecreateFailed, At: t0, SandboxID: "a", Node: "n2"},
				{Op: opDelete, At: t0, SandboxID: "a"},
			},
			errs:  []error{nil, nil, nil},
			names: map[string]string{},
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

// TestFSMFailoverHandsOverClaims checks what fail_node does to the claims of
// the dead node's attempts: their locks end, each goes to the node its
// sandbox moved to (or to none), they are kept for the retention, and a
// retry then takes the attempt over with its generation and target; claims
// of other nodes, and completed ones, stay as they were.
func TestFSMFailoverHandsOverClaims(t *testing.T) {
	spec := []byte(`{"image":"img"}`)
	claim := func(key, node string, target string) []command {
		req := &sandpit.ClaimRequest{Scope: "v1", Fingerprint: key, RequestHash: "h-" + key, PendingTTL: time.Hour}
		cmds := []command{{Op: opClaim, At: t0, Node: node, Claim: req, Attempt: "try-" + key}}
		if target != "" {
			cmds = append(cmds, command{Op: opSetTarget, At: t0, Scope: "v1", Fingerprint: key, Generation: 1, SandboxID: target})
		}
		return cmds
	}
	var log []command
	log = append(log,
		command{Op: opReserve, At: t0, SandboxID: "a", Name: "moved", Node: "n3", Place: true},
		command{Op: opSetSpec, At: t0, SandboxID: "a", Node: "n3", Spec: spec},
		command{Op: opReserve, At: t0, SandboxID: "b", Name: "specless", Node: "n3", Place: true},
	)
	log = append(log, claim("ka", "n3", "a")...) // its sandbox is re-created on n2
	log = append(log, claim("kb", "n3", "b")...) // its sandbox has no spec: lost
	log = append(log, claim("kn", "n3", "")...)  // died before it reserved anything
	log = append(log, claim("kc", "n1", "c")...) // another node's attempt
	log = append(log, claim("kd", "n3", "a")...) // completed below
	log = append(log, command{Op: opComplete, At: t0, Attempt: "done-kd", Completion: &sandpit.Completion{
		Scope: "v1", Fingerprint: "kd", Generation: 1, TargetID: "a", ResponseStatus: 201, ReplayTTL: time.Minute}})
	t1 := t0.Add(time.Minute)
	log = append(log, command{Op: opFailNode, At: t1, Node: "n1", Failed: "n3", Targets: map[string]string{"a": "n2", "b": "n2"}, Keep: 24 * time.Hour})

	a, b := NewFSM(), NewFSM()
	for _, f := range []*FSM{a, b} {
		for i, r := range applyAll(t, f, log...) {
			if r.Err != nil {
				t.Fatalf("command %d (%s): %v", i, log[i].Op, r.Err)
			}
		}
	}
	if a.Digest() != b.Digest() {
		t.Fatal("digests differ after the same log")
	}
	tests := []struct {
		key, holder string
		lockEnded   bool
	}{
		{"ka", "n2", true},
		{"kb", "", true},
		{"kn", "", true},
		{"kc", "n1", false},
	}
	for _, tc := range tests {
		r := a.idx.Claims[claimKey("v1", tc.key)]
		if r.Node != tc.holder || r.State != claimPending {
			t.Errorf("%s: held by %q in state %s, want %q pending", tc.key, r.Node, r.State, tc.holder)
		}
		if ended := !r.LockedUntil.After(t1); ended != tc.lockEnded {
			t.Errorf("%s: lock until %s, ended %v, want %v", tc.key, r.LockedUntil, ended, tc.lockEnded)
		}
		if tc.lockEnded && r.ReplayUntil.Before(t1.Add(24*time.Hour)) {
			t.Errorf("%s: kept until %s, want the retention after the failover", tc.key, r.ReplayUntil)
		}
		var want []string
		if tc.holder != "" {
			want = []string{tc.holder}
		}
		if got := a.PendingClaimHolders(tc.key); !slices.Equal(got, want) {
			t.Errorf("PendingClaimHolders(%s) = %q, want %q", tc.key, got, want)
		}
	}
	if r := a.idx.Claims[claimKey("v1", "kd")]; r.State != claimReady || r.Node != "n3" {
		t.Errorf("completed claim changed: %+v", r)
	}
	if a.holdsPendingClaims("n3") {
		t.Error("the failed node still holds pending claims")
	}
	// A retry on the new owner takes the attempt over: same generation,
	// same target, so it finds the re-created sandbox instead of making one.
	res := applyAll(t, a, claim("ka", "n2", "")[0])[0]
	if res.Err != nil || res.Claim.Outcome != sandpit.Acquired || res.Claim.Generation != 1 || res.Claim.TargetID != "a" {
		t.Errorf("retry of ka on n2: %+v %v, want acquired generation 1 target a", res.Claim, res.Err)
	}
	// Resuming the attempt whose sandbox was lost answers that it was lost.
	res = applyAll(t, a, command{Op: opReserve, At: t1, SandboxID: "b", Name: "specless", Node: "n1", Place: true})[0]
	if !errors.Is(res.Err, sandpit.ErrSandboxLost) {
		t.Errorf("reserve of the lost sandbox: %v, want sandbox lost", res.Err)
	}
}
