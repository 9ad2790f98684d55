package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sandpit-dev/sandpit"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// applyAll runs commands through FSM.Apply as raft would, returning results.
func applyAll(t *testing.T, f *FSM, cmds ...command) []Result {
	t.Helper()
	var out []Result
	for i, c := range cmds {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: b}).(Result))
	}
	return out
}

func TestFSMNamesAndHostnames(t *testing.T) {
	tests := []struct {
		name string
		cmds []command
		want []error // per command
	}{
		{
			name: "first reservation of a name wins",
			cmds: []command{
				{Op: opReserve, At: t0, SandboxID: "a", Name: "web"},
				{Op: opReserve, At: t0, SandboxID: "b", Name: "web"},
				{Op: opReserve, At: t0, SandboxID: "a", Name: "web"}, // retry of the winner
			},
			want: []error{nil, sandpit.ErrNameConflict, nil},
		},
		{
			name: "delete frees the name",
			cmds: []command{
				{Op: opReserve, At: t0, SandboxID: "a", Name: "web"},
				{Op: opDelete, At: t0, SandboxID: "a"},
				{Op: opReserve, At: t0, SandboxID: "b", Name: "web"},
			},
			want: []error{nil, nil, nil},
		},
		{
			name: "unnamed sandboxes never conflict",
			cmds: []command{
				{Op: opReserve, At: t0, SandboxID: "a"},
				{Op: opReserve, At: t0, SandboxID: "b"},
			},
			want: []error{nil, nil},
		},
		{
			name: "one placement per id",
			cmds: []command{
				{Op: opReserve, At: t0, SandboxID: "a"},
				{Op: opPlace, At: t0, SandboxID: "a", Node: "n1"},
				{Op: opPlace, At: t0, SandboxID: "a", Node: "n1"},
				{Op: opPlace, At: t0, SandboxID: "a", Node: "n2"},
				{Op: opPlace, At: t0, SandboxID: "zz", Node: "n2"},
			},
			want: []error{nil, nil, nil, sandpit.ErrNameConflict, sandpit.ErrNotFound},
		},
		{
			name: "hostnames are unique and freed with their sandbox",
			cmds: []command{
				{Op: opReserve, At: t0, SandboxID: "a"},
				{Op: opReserve, At: t0, SandboxID: "b"},
				{Op: opAddHostname, At: t0, SandboxID: "a", Hostname: "x.example.com"},
				{Op: opAddHostname, At: t0, SandboxID: "b", Hostname: "x.example.com"},
				{Op: opAddHostname, At: t0, SandboxID: "a", Hostname: "x.example.com"},
				{Op: opRemoveHostname, At: t0, SandboxID: "b", Hostname: "x.example.com"}, // not b's: no-op
				{Op: opAddHostname, At: t0, SandboxID: "b", Hostname: "x.example.com"},
				{Op: opDelete, At: t0, SandboxID: "a"},
				{Op: opAddHostname, At: t0, SandboxID: "b", Hostname: "x.example.com"},
			},
			want: []error{nil, nil, nil, sandpit.ErrHostnameConflict, nil, nil, sandpit.ErrHostnameConflict, nil, nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := applyAll(t, NewFSM(), tt.cmds...)
			for i, r := range res {
				if !errors.Is(r.Err, tt.want[i]) || (tt.want[i] == nil) != (r.Err == nil) {
					t.Errorf("command %d (%s): err %v, want %v", i, tt.cmds[i].Op, r.Err, tt.want[i])
				}
			}
		})
	}
}

func TestFSMClaims(t *testing.T) {
	req := func(hash string) *sandpit.ClaimRequest {
		return &sandpit.ClaimRequest{Scope: "v1", Fingerprint: "k", RequestHash: hash, PendingTTL: time.Minute}
	}
	done := func(gen int64, ttl time.Duration) *sandpit.Completion {
		return &sandpit.Completion{Scope: "v1", Fingerprint: "k", Generation: gen, TargetID: "sb1", ResponseStatus: 201, ResponseBody: []byte(`{"id":"sb1"}`), ReplayTTL: ttl}
	}
	tests := []struct {
		name    string
		cmds    []command
		want    sandpit.ClaimOutcome // of the last command
		wantGen int64
	}{
		{"new key is acquired", []command{{Op: opClaim, At: t0, Claim: req("h"), Attempt: "1"}}, sandpit.Acquired, 1},
		{"the same proposal committed twice acquires twice", []command{
			{Op: opClaim, At: t0, Claim: req("h"), Attempt: "1"},
			{Op: opClaim, At: t0, Claim: req("h"), Attempt: "1"},
		}, sandpit.Acquired, 1},
		{"second attempt while locked is in flight", []command{
			{Op: opClaim, At: t0, Claim: req("h"), Attempt: "1"},
			{Op: opClaim, At: t0.Add(time.Second), Claim: req("h"), Attempt: "2"},
		}, sandpit.InFlight, 1},
		{"other body is a mismatch", []command{
			{Op: opClaim, At: t0, Claim: req("h"), Attempt: "1"},
			{Op: opClaim, At: t0, Claim: req("other"), Attempt: "2"},
		}, sandpit.Mismatch, 1},
		{"expired lock is taken over at the same generation", []command{
			{Op: opClaim, At: t0, Claim: req("h"), Attempt: "1"},
			{Op: opClaim, At: t0.Add(2 * time.Minute), Claim: req("h"), Attempt: "2"},
		}, sandpit.Acquired, 1},
		{"completed is replayed", []command{
			{Op: opClaim, At: t0, Claim: req("h"), Attempt: "1"},
			{Op: opComplete, At: t0, Completion: done(1, time.Hour), Attempt: "c"},
			{Op: opClaim, At: t0.Add(time.Minute), Claim: req("h"), Attempt: "2"},
		}, sandpit.Replay, 1},
		{"after the replay window a new generation starts", []command{
			{Op: opClaim, At: t0, Claim: req("h"), Attempt: "1"},
			{Op: opComplete, At: t0, Completion: done(1, time.Hour), Attempt: "c"},
			{Op: opClaim, At: t0.Add(2 * time.Hour), Claim: req("other"), Attempt: "2"},
		}, sandpit.Acquired, 2},
		{"abandon frees the key", []command{
			{Op: opClaim, At: t0, Claim: req("h"), Attempt: "1"},
			{Op: opAbandon, At: t0, Scope: "v1", Fingerprint: "k", Generation: 1},
			{Op: opClaim, At: t0, Claim: req("h"), Attempt: "2"},
		}, sandpit.Acquired, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := applyAll(t, NewFSM(), tt.cmds...)
			for i, r := range res {
				if r.Err != nil {
					t.Fatalf("command %d: %v", i, r.Err)
				}
			}
			last := res[len(res)-1].Claim
			if last.Outcome != tt.want || last.Generation != tt.wantGen {
				t.Fatalf("outcome %v generation %d, want %v %d", last.Outcome, last.Generation, tt.want, tt.wantGen)
			}
			if tt.want == sandpit.Replay && (last.TargetID != "sb1" || string(last.ResponseBody) != `{"id":"sb1"}` || last.ResponseStatus != 201) {
				t.Fatalf("replay lost the stored response: %+v", last)
			}
		})
	}
}

func TestFSMCompleteTwiceAndLost(t *testing.T) {
	f := NewFSM()
	c := &sandpit.Completion{Scope: "s", Fingerprint: "k", Generation: 1, ReplayTTL: time.Hour}
	res := applyAll(t, f,
		command{Op: opClaim, At: t0, Claim: &sandpit.ClaimRequest{Scope: "s", Fingerprint: "k", PendingTTL: time.Minute}, Attempt: "a"},
		command{Op: opComplete, At: t0, Completion: c, Attempt: "c1"},
		command{Op: opComplete, At: t0, Completion: c, Attempt: "c1"}, // the same proposal again
		command{Op: opComplete, At: t0, Completion: c, Attempt: "c2"}, // someone else's
	)
	if res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("complete: %v, repeated: %v", res[1].Err, res[2].Err)
	}
	if !errors.Is(res[3].Err, sandpit.ErrClaimLost) {
		t.Fatalf("second completion: %v, want ErrClaimLost", res[3].Err)
	}
}

func TestFSMReapUsesTheEntryTime(t *testing.T) {
	f := NewFSM()
	applyAll(t, f,
		command{Op: opClaim, At: t0, Claim: &sandpit.ClaimRequest{Scope: "s", Fingerprint: "old", PendingTTL: time.Minute}, Attempt: "a"},
		command{Op: opClaim, At: t0.Add(time.Hour), Claim: &sandpit.ClaimRequest{Scope: "s", Fingerprint: "new", PendingTTL: time.Minute}, Attempt: "b"},
		command{Op: opReap, At: t0.Add(30 * time.Minute)},
	)
	if _, ok := f.Claim("s", "old"); ok {
		t.Fatal("reap kept a claim past its lock")
	}
	if _, ok := f.Claim("s", "new"); !ok {
		t.Fatal("reap removed a claim whose lock is live at the entry's time")
	}
}

func TestFSMSnapshotRestore(t *testing.T) {
	f := NewFSM()
	applyAll(t, f,
		command{Op: opRegisterNode, At: t0, NodeInfo: &Node{ID: "n1", APIAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2"}},
		command{Op: opReserve, At: t0, SandboxID: "a", Name: "web", Labels: map[string]string{"team": "x"}},
		command{Op: opPlace, At: t0, SandboxID: "a", Node: "n1"},
		command{Op: opAddHostname, At: t0, SandboxID: "a", Hostname: "h.example.com"},
		command{Op: opClaim, At: t0, Claim: &sandpit.ClaimRequest{Scope: "s", Fingerprint: "k", PendingTTL: time.Minute}, Attempt: "a"},
		command{Op: opComplete, At: t0, Completion: &sandpit.Completion{Scope: "s", Fingerprint: "k", Generation: 1, TargetID: "a", ResponseStatus: 201, ResponseBody: []byte("body"), ReplayTTL: time.Hour}, Attempt: "c"},
	)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if f.Digest() != g.Digest() {
		t.Fatal("restored index has another digest")
	}
	// The restored index keeps enforcing: the name and hostname are held.
	res := applyAll(t, g,
		command{Op: opReserve, At: t0, SandboxID: "b", Name: "web"},
		command{Op: opReserve, At: t0, SandboxID: "c"},
		command{Op: opAddHostname, At: t0, SandboxID: "c", Hostname: "h.example.com"},
	)
	if !errors.Is(res[0].Err, sandpit.ErrNameConflict) || !errors.Is(res[2].Err, sandpit.ErrHostnameConflict) {
		t.Fatalf("after restore: %v, %v", res[0].Err, res[2].Err)
	}
	if c, _ := g.Claim("s", "k"); string(c.ResponseBody) != "body" || c.TargetID != "a" {
		t.Fatalf("restored claim %+v", c)
	}
	if p, _ := g.PlacementByHostname("h.example.com"); p.Node != "n1" || p.Labels["team"] != "x" {
		t.Fatalf("restored placement %+v", p)
	}
	// An empty index restores too.
	empty := NewFSM()
	s2, _ := empty.Snapshot()
	sink2 := &memSink{}
	_ = s2.Persist(sink2)
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink2.Bytes()))); err != nil || g.Digest() != empty.Digest() {
		t.Fatalf("restore of an empty index: %v", err)
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// TestFSMClaimResumesWhereItsSandboxIs: a pending claim whose lock ran out
// is taken over only by the node its target is placed on, while that node
// is a member and the sandbox is not lost. Taken over elsewhere, the
// attempt could not reserve its own sandbox and would answer name_conflict
// for a name it holds.
func TestFSMClaimResumesWhereItsSandboxIs(t *testing.T) {
	req := &sandpit.ClaimRequest{Scope: "v1", Fingerprint: "k", RequestHash: "h", PendingTTL: time.Minute}
	expired := t0.Add(2 * time.Minute)
	// The attempt on n2 claimed the key, chose sb1 and reserved it there.
	started := []command{
		{Op: opRegisterNode, At: t0, NodeInfo: &Node{ID: "n2", APIAddr: "127.0.0.1:2", RaftAddr: "127.0.0.1:3"}},
		{Op: opRegisterNode, At: t0, NodeInfo: &Node{ID: "n3", APIAddr: "127.0.0.1:4", RaftAddr: "127.0.0.1:5"}},
		{Op: opClaim, At: t0, Node: "n2", Claim: req, Attempt: "1"},
		{Op: opSetTarget, At: t0, Node: "n2", Scope: "v1", Fingerprint: "k", Generation: 1, SandboxID: "sb1"},
		{Op: opReserve, At: t0, Node: "n2", SandboxID: "sb1", Name: "web", Place: true},
	}
	tests := []struct {
		name  string
		then  []command
		want  sandpit.ClaimOutcome
		owner string // the claim's node afterwards
	}{
		{"another node waits", []command{
			{Op: opClaim, At: expired, Node: "n3", Claim: req, Attempt: "2"},
		}, sandpit.InFlight, "n2"},
		{"the node holding the sandbox takes it over", []command{
			{Op: opClaim, At: expired, Node: "n2", Claim: req, Attempt: "2"},
		}, sandpit.Acquired, "n2"},
		{"once the sandbox is lost another node takes it over", []command{
			{Op: opFailNode, At: expired, Failed: "n2"},
			{Op: opClaim, At: expired, Node: "n3", Claim: req, Attempt: "2"},
		}, sandpit.Acquired, "n3"},
		{"once the node is removed another node takes it over", []command{
			{Op: opRemoveNode, At: expired, Node: "n2"},
			{Op: opClaim, At: expired, Node: "n3", Claim: req, Attempt: "2"},
		}, sandpit.Acquired, "n3"},
		{"once the placement is released another node takes it over", []command{
			{Op: opDelete, At: expired, SandboxID: "sb1"},
			{Op: opClaim, At: expired, Node: "n3", Claim: req, Attempt: "2"},
		}, sandpit.Acquired, "n3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFSM()
			res := applyAll(t, f, append(append([]command{}, started...), tt.then...)...)
			for i, r := range res {
				if r.Err != nil {
					t.Fatalf("command %d: %v", i, r.Err)
				}
			}
			last := res[len(res)-1].Claim
			if last.Outcome != tt.want || last.Generation != 1 || last.TargetID != "sb1" {
				t.Fatalf("outcome %v generation %d target %q, want %v 1 sb1", last.Outcome, last.Generation, last.TargetID, tt.want)
			}
			if holders := f.PendingClaimHolders("k"); len(holders) != 1 || holders[0] != tt.owner {
				t.Fatalf("pending on %v, want %s", holders, tt.owner)
			}
		})
	}
}
