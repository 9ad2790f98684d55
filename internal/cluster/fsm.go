// Package cluster replicates the index that must be unique across the nodes of
// a Sandpit cluster (sandbox placements, names, custom hostnames and
// idempotency claims) through a Raft log, and tracks membership by gossip.
//
// Every decision that a single node makes with one SQLite writer ("is this
// name free?", "who holds this Idempotency-Key?") is made here by the order of
// the Raft log instead: the first committed entry wins and every later one
// sees its effect, on every node, in the same order. Apply is deterministic:
// it reads no clock, only the time the proposer put inside the entry.
package cluster

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sandpit-dev/sandpit"
)

// Placement states. A reservation holds the name (and the id) before any node
// has been chosen; placing it names the owner that creates the sandbox.
const (
	PlacementReserved = "reserved"
	PlacementPlaced   = "placed"
	// PlacementLost: the owner node died and no node re-created the
	// sandbox; every call but a delete answers 410 until the owner comes
	// back or the user deletes it.
	PlacementLost = "lost"
	// PlacementRecreating: the leader chose Node to re-create the sandbox of
	// a dead node from its Spec; Node makes it placed when done.
	PlacementRecreating = "recreating"
)

// Node is a member as registered in the replicated index: where its API, its
// preview proxy and its Raft endpoint are, the most sandboxes it may own, and
// whether an operator drained it. How many it runs right now is not here; it
// changes often and travels by gossip.
type Node struct {
	ID         string `json:"id"`
	APIAddr    string `json:"api_addr"`
	ProxyAddr  string `json:"proxy_addr,omitempty"`
	PublicHost string `json:"public_host,omitempty"`
	RaftAddr   string `json:"raft_addr"`
	GossipAddr string `json:"gossip_addr,omitempty"`
	// MaxSandboxes is the node's --max-sandboxes (0 = no cap). Apply refuses
	// a placement that would take the node past it, so creates decided on
	// different nodes at once can never overshoot.
	MaxSandboxes int `json:"max_sandboxes,omitempty"`
	// Draining is set by `sandpit cluster drain`: the node keeps what it
	// runs and takes no new placement. Registration never changes it.
	Draining bool `json:"draining,omitempty"`
}

// Placement is one sandbox as the cluster knows it.
type Placement struct {
	SandboxID string            `json:"sandbox_id"`
	Node      string            `json:"node,omitempty"` // owner; "" while only reserved
	Name      string            `json:"name,omitempty"`
	Owner     string            `json:"owner,omitempty"` // the principal's owner
	Labels    map[string]string `json:"labels,omitempty"`
	Image     string            `json:"image,omitempty"`
	Hostnames []string          `json:"hostnames,omitempty"` // sorted
	State     string            `json:"state"`
	CreatedAt time.Time         `json:"created_at"`
	// Spec is what a node needs to re-create the sandbox after its owner
	// died: opaque here, written and read by the service layer.
	Spec json.RawMessage `json:"spec,omitempty"`
}

// Lost says, of a lost placement, what lost it: its node's death, or a
// re-creation that failed (which leaves it on no node).
func (p Placement) Lost() string {
	if p.Node == "" {
		return "its re-creation on another node failed"
	}
	return "its node " + p.Node + " died"
}

// ClaimRecord is one replicated idempotency claim: the SQLite row's columns
// plus the node whose attempt holds or made it.
type ClaimRecord struct {
	Scope          string    `json:"scope"`
	Fingerprint    string    `json:"fingerprint"`
	Generation     int64     `json:"generation"`
	State          string    `json:"state"` // "pending" or "ready"
	TargetID       string    `json:"target_id,omitempty"`
	RequestHash    string    `json:"request_hash,omitempty"`
	Node           string    `json:"node,omitempty"`
	Attempt        string    `json:"attempt,omitempty"`    // the claim proposal that holds it
	Completion     string    `json:"completion,omitempty"` // the completion proposal that made it ready
	ResponseStatus int       `json:"response_status,omitempty"`
	ResponseBody   []byte    `json:"response_body,omitempty"`
	LockedUntil    time.Time `json:"locked_until"`
	ReplayUntil    time.Time `json:"replay_until"`
	ClaimedAt      time.Time `json:"claimed_at"` // when its holder acquired it
}

func (c ClaimRecord) claim(o sandpit.ClaimOutcome) sandpit.Claim {
	return sandpit.Claim{
		Outcome:        o,
		Scope:          c.Scope,
		Fingerprint:    c.Fingerprint,
		Generation:     c.Generation,
		TargetID:       c.TargetID,
		State:          c.State,
		RequestHash:    c.RequestHash,
		ResponseStatus: c.ResponseStatus,
		ResponseBody:   slices.Clone(c.ResponseBody),
		LockedUntil:    c.LockedUntil,
		ReplayUntil:    c.ReplayUntil,
	}
}

const (
	claimPending = "pending"
	claimReady   = "ready"
)

// Index is the replicated state. Its JSON form is the snapshot format and the
// input of the digest; encoding/json writes map keys sorted, so two equal
// indexes encode to the same bytes.
type Index struct {
	Nodes      map[string]Node         `json:"nodes"`
	Placements map[string]*Placement   `json:"placements"`
	Names      map[string]string       `json:"names"`     // name -> sandbox id
	Hostnames  map[string]string       `json:"hostnames"` // custom hostname -> sandbox id
	Claims     map[string]*ClaimRecord `json:"claims"`    // claimKey -> claim
	// Marks holds each node's last barrier, an entry whose only purpose is
	// to tell its proposer when it has applied everything before it.
	Marks map[string]string `json:"marks"`
	// Templates holds the named templates (owner+name -> record) and
	// Builds the node of each build (templates.go).
	Templates map[string]*TemplateRecord `json:"templates,omitempty"`
	Builds    map[string]*BuildRecord    `json:"builds,omitempty"`
}

func newIndex() *Index {
	return &Index{
		Nodes:      map[string]Node{},
		Placements: map[string]*Placement{},
		Names:      map[string]string{},
		Hostnames:  map[string]string{},
		Claims:     map[string]*ClaimRecord{},
		Marks:      map[string]string{},
		Templates:  map[string]*TemplateRecord{},
		Builds:     map[string]*BuildRecord{},
	}
}

func claimKey(scope, fingerprint string) string { return scope + "\x00" + fingerprint }

// Operations of the log.
const (
	opRegisterNode   = "register_node"
	opRemoveNode     = "remove_node"
	opReserve        = "reserve"
	opPlace          = "place"
	opDelete         = "delete"
	opAddHostname    = "add_hostname"
	opRemoveHostname = "remove_hostname"
	opClaim          = "claim"
	opSetTarget      = "set_target"
	opComplete       = "complete"
	opAbandon        = "abandon"
	opReap           = "reap"
	opMark           = "mark"
	opExpireNode     = "expire_node_claims"
	opRenew          = "renew"
	opSetDrain       = "set_drain"
	// Failover (failover.go).
	opSetSpec        = "set_spec"
	opFailNode       = "fail_node"
	opRecreated      = "recreated"
	opRecreateFailed = "recreate_failed"
	opReclaim        = "reclaim"
	opRelease        = "release"
)

// command is one log entry. At is the proposer's clock, the only time Apply
// ever reads.
type command struct {
	Op          string                `json:"op"`
	At          time.Time             `json:"at"`
	Node        string                `json:"node,omitempty"` // proposer, or the node being placed on
	SandboxID   string                `json:"sandbox_id,omitempty"`
	Name        string                `json:"name,omitempty"`
	Owner       string                `json:"owner,omitempty"`
	Labels      map[string]string     `json:"labels,omitempty"`
	Image       string                `json:"image,omitempty"`
	Hostname    string                `json:"hostname,omitempty"`
	NodeInfo    *Node                 `json:"node_info,omitempty"`
	Claim       *sandpit.ClaimRequest `json:"claim,omitempty"`
	Completion  *sandpit.Completion   `json:"completion,omitempty"`
	Scope       string                `json:"scope,omitempty"`
	Fingerprint string                `json:"fingerprint,omitempty"`
	Generation  int64                 `json:"generation,omitempty"`
	// Attempt names one proposal of a claim or completion, so that the same
	// entry committed twice (proposed again after its leader lost leadership
	// without answering) gets the first answer again.
	Attempt string `json:"attempt,omitempty"`
	// Place, on a reservation, places the sandbox on Node in the same entry.
	Place bool `json:"place,omitempty"`
	// Keep is how long expired claims stay (expire_node_claims).
	Keep time.Duration `json:"keep,omitempty"`
	// Until is a renewed claim's new lock deadline.
	Until time.Time `json:"until,omitempty"`
	// Drain is the drain flag set_drain gives Node.
	Drain bool `json:"drain,omitempty"`
	// Spec is a placement's re-creation spec (set_spec).
	Spec json.RawMessage `json:"spec,omitempty"`
	// Targets maps each sandbox of a failed node to the node chosen to
	// re-create it (fail_node); a sandbox without one becomes lost.
	Targets map[string]string `json:"targets,omitempty"`
	// Failed is the dead node whose sandboxes fail_node re-places.
	Failed string `json:"failed,omitempty"`
	// Template is the template a template operation is about.
	Template *TemplateRecord `json:"template,omitempty"`
}

// Result is what applying one command returns: an error sentinel from
// package sandpit, or the claim for claim operations.
type Result struct {
	Claim sandpit.Claim
	// Template is the record a claim_template lands on.
	Template *TemplateRecord
	Err      error
}

// Error codes carry a Result's error across a forwarded apply; they decode to
// the same sentinels so callers test them with errors.Is wherever they ran.
var errCodes = map[string]error{
	"name_conflict":     sandpit.ErrNameConflict,
	"hostname_conflict": sandpit.ErrHostnameConflict,
	"not_found":         sandpit.ErrNotFound,
	"claim_lost":        sandpit.ErrClaimLost,
	"no_capacity":       sandpit.ErrNoCapacity,
	"sandbox_lost":      sandpit.ErrSandboxLost,
	"invalid":           ErrInvalidCommand,
}

// ErrInvalidCommand is returned for a log entry that cannot be applied (a
// programming error of the proposer, never of the user's input).
var ErrInvalidCommand = errors.New("invalid cluster command")

func errCode(err error) string {
	if err == nil {
		return ""
	}
	for code, e := range errCodes {
		if errors.Is(err, e) {
			return code
		}
	}
	return "invalid"
}

// FSM applies the log to the index. Reads take the read lock; Apply, which
// raft calls from one goroutine, takes the write lock.
type FSM struct {
	mu  sync.RWMutex
	idx *Index
}

// NewFSM returns an FSM over an empty index.
func NewFSM() *FSM { return &FSM{idx: newIndex()} }

var _ raft.FSM = (*FSM)(nil)

// Apply implements raft.FSM. It returns a Result.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return Result{}
	}
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return Result{Err: fmt.Errorf("%w: %v", ErrInvalidCommand, err)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idx.apply(c)
}

func (x *Index) apply(c command) Result {
	switch c.Op {
	case opRegisterNode:
		if c.NodeInfo == nil || c.NodeInfo.ID == "" {
			return Result{Err: ErrInvalidCommand}
		}
		n := *c.NodeInfo
		// The drain flag belongs to the operator's set_drain entries; a
		// node re-registering its addresses keeps it.
		n.Draining = x.Nodes[n.ID].Draining
		x.Nodes[n.ID] = n
		return Result{}
	case opSetDrain:
		return x.setDrain(c)
	case opRemoveNode:
		delete(x.Nodes, c.Node)
		return Result{}
	case opReserve:
		return x.reserve(c)
	case opPlace:
		p, ok := x.Placements[c.SandboxID]
		if !ok {
			return Result{Err: fmt.Errorf("place %s: %w", c.SandboxID, sandpit.ErrNotFound)}
		}
		// The first placement wins; a retry of the same placement is a no-op
		// and a second, different one is refused, so one id never gets two
		// owners.
		if p.State == PlacementPlaced && p.Node != c.Node {
			return Result{Err: fmt.Errorf("place %s on %s: already placed on %s: %w", c.SandboxID, c.Node, p.Node, sandpit.ErrNameConflict)}
		}
		if p.Node != c.Node {
			if err := x.admits(c.Node); err != nil {
				return Result{Err: fmt.Errorf("place %s: %w", c.SandboxID, err)}
			}
		}
		p.Node, p.State = c.Node, PlacementPlaced
		return Result{}
	case opDelete:
		x.deletePlacement(c.SandboxID)
		return Result{}
	case opAddHostname:
		return x.addHostname(c)
	case opRemoveHostname:
		if id, ok := x.Hostnames[c.Hostname]; ok && id == c.SandboxID {
			delete(x.Hostnames, c.Hostname)
			if p := x.Placements[id]; p != nil {
				p.Hostnames = slices.DeleteFunc(p.Hostnames, func(h string) bool { return h == c.Hostname })
			}
		}
		return Result{}
	case opClaim:
		return x.claim(c)
	case opSetTarget:
		r, ok := x.Claims[claimKey(c.Scope, c.Fingerprint)]
		if !ok || r.State != claimPending || r.Generation != c.Generation {
			return Result{Err: fmt.Errorf("set target %s/%s generation %d: %w", c.Scope, c.Fingerprint, c.Generation, sandpit.ErrClaimLost)}
		}
		r.TargetID = c.SandboxID
		return Result{}
	case opComplete:
		return x.complete(c)
	case opAbandon:
		// Only the generation the abandoning attempt held is removed: a later
		// generation belongs to someone else.
		// Generation 0 deletes the row whatever its state, like the SQLite
		// store's DeleteIdempotentRequest.
		k := claimKey(c.Scope, c.Fingerprint)
		if r, ok := x.Claims[k]; ok && (c.Generation == 0 || r.Generation == c.Generation && r.State == claimPending) {
			delete(x.Claims, k)
		}
		return Result{}
	case opRenew:
		r, ok := x.Claims[claimKey(c.Scope, c.Fingerprint)]
		if !ok || r.State != claimPending || r.Generation != c.Generation {
			return Result{Err: fmt.Errorf("renew %s/%s generation %d: %w", c.Scope, c.Fingerprint, c.Generation, sandpit.ErrClaimLost)}
		}
		r.LockedUntil = c.Until
		return Result{}
	case opExpireNode:
		// c.At is the restarted node's start: only the claims it took
		// before then are ended (attempts of the previous run); generation
		// and target stay, so the retry resumes the same attempt.
		for _, r := range x.Claims {
			if r.Node != c.Node || r.State != claimPending || !r.ClaimedAt.Before(c.At) {
				continue
			}
			if r.LockedUntil.After(c.At) {
				r.LockedUntil = c.At
			}
			if keep := c.At.Add(c.Keep); keep.After(r.ReplayUntil) {
				r.ReplayUntil = keep
			}
		}
		return Result{}
	case opMark:
		x.Marks[c.Node] = c.Attempt
		return Result{}
	case opClaimTemplate, opPublishTemplate, opDeleteTemplate, opRecordBuild:
		return x.applyTemplate(c)
	case opSetSpec, opFailNode, opRecreated, opRecreateFailed, opReclaim, opRelease:
		return x.applyFailover(c)
	case opReap:
		for k, r := range x.Claims {
			if r.LockedUntil.Before(c.At) && (r.ReplayUntil.IsZero() || r.ReplayUntil.Before(c.At)) {
				delete(x.Claims, k)
			}
		}
		return Result{}
	}
	return Result{Err: fmt.Errorf("%w: unknown op %q", ErrInvalidCommand, c.Op)}
}

func (x *Index) reserve(c command) Result {
	if c.SandboxID == "" {
		return Result{Err: ErrInvalidCommand}
	}
	if p, ok := x.Placements[c.SandboxID]; ok {
		if p.State == PlacementLost {
			// A retry resuming the attempt that made this sandbox, after
			// its node died with it: the answer is that it was lost.
			return Result{Err: fmt.Errorf("reserve %s: %s: %w", c.SandboxID, p.Lost(), sandpit.ErrSandboxLost)}
		}
		// A retry of the same reservation (its first proposal may have
		// committed before the proposer lost leadership) succeeds again.
		if p.Name == c.Name && (!c.Place || p.Node == c.Node) {
			return Result{}
		}
		return Result{Err: fmt.Errorf("reserve %s: id already reserved under another name: %w", c.SandboxID, sandpit.ErrNameConflict)}
	}
	if c.Name != "" {
		if holder, ok := x.Names[c.Name]; ok && holder != c.SandboxID {
			return Result{Err: fmt.Errorf("reserve name %q: %w", c.Name, sandpit.ErrNameConflict)}
		}
	}
	if c.Place {
		if err := x.admits(c.Node); err != nil {
			return Result{Err: fmt.Errorf("reserve %s: %w", c.SandboxID, err)}
		}
	}
	if c.Name != "" {
		x.Names[c.Name] = c.SandboxID
	}
	p := &Placement{
		SandboxID: c.SandboxID,
		Name:      c.Name,
		Owner:     c.Owner,
		Labels:    maps.Clone(c.Labels),
		Image:     c.Image,
		State:     PlacementReserved,
		CreatedAt: c.At,
	}
	if c.Place {
		p.Node, p.State = c.Node, PlacementPlaced
	}
	x.Placements[c.SandboxID] = p
	return Result{}
}

func (x *Index) deletePlacement(id string) {
	p, ok := x.Placements[id]
	if !ok {
		return
	}
	if p.Name != "" && x.Names[p.Name] == id {
		delete(x.Names, p.Name)
	}
	for _, h := range p.Hostnames {
		if x.Hostnames[h] == id {
			delete(x.Hostnames, h)
		}
	}
	delete(x.Placements, id)
}

func (x *Index) addHostname(c command) Result {
	p, ok := x.Placements[c.SandboxID]
	if !ok {
		return Result{Err: fmt.Errorf("bind %s: sandbox %s: %w", c.Hostname, c.SandboxID, sandpit.ErrNotFound)}
	}
	if holder, ok := x.Hostnames[c.Hostname]; ok {
		if holder == c.SandboxID {
			return Result{}
		}
		return Result{Err: fmt.Errorf("bind %s: %w", c.Hostname, sandpit.ErrHostnameConflict)}
	}
	x.Hostnames[c.Hostname] = c.SandboxID
	p.Hostnames = append(p.Hostnames, c.Hostname)
	slices.Sort(p.Hostnames)
	return Result{}
}

// claim mirrors the SQLite store's ClaimIdempotentRequest decision table, with
// the proposer's time standing in for the database's clock.
func (x *Index) claim(c command) Result {
	req := c.Claim
	if req == nil || req.Scope == "" || req.Fingerprint == "" || req.PendingTTL <= 0 {
		return Result{Err: ErrInvalidCommand}
	}
	k := claimKey(req.Scope, req.Fingerprint)
	lock := c.At.Add(req.PendingTTL)
	r, ok := x.Claims[k]
	if !ok {
		r = &ClaimRecord{
			Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: 1,
			State: claimPending, RequestHash: req.RequestHash, Node: c.Node, Attempt: c.Attempt, LockedUntil: lock, ClaimedAt: c.At,
		}
		x.Claims[k] = r
		return Result{Claim: r.claim(sandpit.Acquired)}
	}
	if c.Attempt != "" && r.Attempt == c.Attempt && r.State == claimPending {
		// This very proposal committed before: answer as the first time.
		return Result{Claim: r.claim(sandpit.Acquired)}
	}
	replayOpen := r.State == claimReady && r.ReplayUntil.After(c.At)
	lockLive := r.State == claimPending && r.LockedUntil.After(c.At)
	bindsKey := r.State == claimPending || replayOpen
	switch {
	case bindsKey && req.RequestHash != "" && r.RequestHash != req.RequestHash:
		return Result{Claim: r.claim(sandpit.Mismatch)}
	case replayOpen:
		return Result{Claim: r.claim(sandpit.Replay)}
	case lockLive:
		out := r.claim(sandpit.InFlight)
		out.ResponseBody = nil
		return Result{Claim: out}
	case r.State == claimPending && x.resumableOnlyElsewhere(r, c.Node):
		// The lock ran out, but the attempt's sandbox is placed on another
		// node that is still a member: only that node can adopt what the
		// attempt made there. Taken over here, the attempt could not reserve
		// its own sandbox (placed elsewhere) and would answer name_conflict
		// for good, while the sandbox might yet be made there. Its retries
		// wait for that node, or for the failover to decide.
		out := r.claim(sandpit.InFlight)
		out.ResponseBody = nil
		return Result{Claim: out}
	case r.State == claimPending:
		// The previous attempt's lock ran out: take the same attempt over,
		// keeping its generation and recorded target.
		r.LockedUntil, r.Node, r.Attempt, r.ClaimedAt = lock, c.Node, c.Attempt, c.At
		if req.RequestHash != "" {
			r.RequestHash = req.RequestHash
		}
		return Result{Claim: r.claim(sandpit.Acquired)}
	default:
		*r = ClaimRecord{
			Scope: req.Scope, Fingerprint: req.Fingerprint, Generation: r.Generation + 1,
			State: claimPending, RequestHash: req.RequestHash, Node: c.Node, Attempt: c.Attempt, LockedUntil: lock, ClaimedAt: c.At,
		}
		return Result{Claim: r.claim(sandpit.Acquired)}
	}
}

// resumableOnlyElsewhere reports whether the pending claim r has a target
// whose placement another registered node than node holds (and which is not
// lost): the attempt can be resumed only there.
func (x *Index) resumableOnlyElsewhere(r *ClaimRecord, node string) bool {
	if r.TargetID == "" {
		return false
	}
	p, ok := x.Placements[r.TargetID]
	if !ok || p.State == PlacementLost || p.Node == "" || p.Node == node {
		return false
	}
	_, registered := x.Nodes[p.Node]
	return registered
}

func (x *Index) complete(c command) Result {
	d := c.Completion
	if d == nil || d.ReplayTTL < 0 {
		return Result{Err: ErrInvalidCommand}
	}
	r, ok := x.Claims[claimKey(d.Scope, d.Fingerprint)]
	if ok && c.Attempt != "" && r.Completion == c.Attempt && r.Generation == d.Generation {
		return Result{}
	}
	if !ok || r.State != claimPending || r.Generation != d.Generation {
		return Result{Err: fmt.Errorf("complete %s/%s generation %d: %w", d.Scope, d.Fingerprint, d.Generation, sandpit.ErrClaimLost)}
	}
	r.State, r.Completion = claimReady, c.Attempt
	if d.TargetID != "" {
		r.TargetID = d.TargetID
	}
	r.ResponseStatus, r.ResponseBody = d.ResponseStatus, slices.Clone(d.ResponseBody)
	r.ReplayUntil = c.At.Add(d.ReplayTTL)
	return Result{}
}

// Snapshot implements raft.FSM: it encodes the index while holding the read
// lock, so the snapshot is one consistent state.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := json.Marshal(f.idx)
	if err != nil {
		return nil, fmt.Errorf("encode cluster index: %w", err)
	}
	return snapshot(b), nil
}

// Restore implements raft.FSM: it replaces the index with the snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	idx := newIndex()
	if err := json.NewDecoder(rc).Decode(idx); err != nil {
		return fmt.Errorf("decode cluster index snapshot: %w", err)
	}
	// A snapshot written with an empty map may decode a nil one; every
	// mutation writes into these maps, so make them.
	fresh := newIndex()
	if idx.Nodes == nil {
		idx.Nodes = fresh.Nodes
	}
	if idx.Placements == nil {
		idx.Placements = fresh.Placements
	}
	if idx.Names == nil {
		idx.Names = fresh.Names
	}
	if idx.Hostnames == nil {
		idx.Hostnames = fresh.Hostnames
	}
	if idx.Claims == nil {
		idx.Claims = fresh.Claims
	}
	if idx.Marks == nil {
		idx.Marks = fresh.Marks
	}
	if idx.Templates == nil {
		idx.Templates = fresh.Templates
	}
	if idx.Builds == nil {
		idx.Builds = fresh.Builds
	}
	f.mu.Lock()
	f.idx = idx
	f.mu.Unlock()
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write cluster index snapshot: %w", err)
	}
	return sink.Close()
}

func (s snapshot) Release() {}

// Digest is a hash of the whole index. Two nodes that applied the same log
// prefix have the same digest; tests and operators compare them.
func (f *FSM) Digest() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := json.Marshal(f.idx)
	if err != nil {
		// Every field is a plain value; encoding cannot fail.
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Placement returns the placement of a sandbox.
func (f *FSM) Placement(id string) (Placement, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.idx.Placements[id]
	if !ok {
		return Placement{}, false
	}
	return p.clone(), true
}

// PlacementByName returns the placement holding a name.
func (f *FSM) PlacementByName(name string) (Placement, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	id, ok := f.idx.Names[name]
	if !ok {
		return Placement{}, false
	}
	return f.idx.Placements[id].clone(), true
}

// PlacementByHostname returns the placement a custom hostname is bound to.
func (f *FSM) PlacementByHostname(host string) (Placement, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	id, ok := f.idx.Hostnames[host]
	if !ok {
		return Placement{}, false
	}
	return f.idx.Placements[id].clone(), true
}

// Placements lists the placements whose labels include every pair of
// labels, ordered by creation time then id.
func (f *FSM) Placements(labels map[string]string) []Placement {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Placement
	for _, p := range f.idx.Placements {
		match := true
		for k, v := range labels {
			if p.Labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, p.clone())
		}
	}
	sortPlacements(out)
	return out
}

// sortPlacements orders placements by creation time, then id.
func sortPlacements(ps []Placement) {
	slices.SortFunc(ps, func(a, b Placement) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.SandboxID, b.SandboxID)
	})
}

// Claim returns the claim of (scope, fingerprint) as it stands.
func (f *FSM) Claim(scope, fingerprint string) (sandpit.Claim, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.idx.Claims[claimKey(scope, fingerprint)]
	if !ok {
		return sandpit.Claim{}, false
	}
	return r.claim(0), true
}

// Nodes returns the registered nodes sorted by id.
func (f *FSM) Nodes() []Node {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := slices.Collect(maps.Values(f.idx.Nodes))
	slices.SortFunc(out, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Counts returns the sizes of the index, for status output.
func (f *FSM) Counts() (placements, names, hostnames, claims int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.idx.Placements), len(f.idx.Names), len(f.idx.Hostnames), len(f.idx.Claims)
}

func (p *Placement) clone() Placement {
	c := *p
	c.Labels = maps.Clone(p.Labels)
	c.Hostnames = slices.Clone(p.Hostnames)
	c.Spec = slices.Clone(p.Spec)
	return c
}

// CountOn returns how many placements a node owns.
func (f *FSM) CountOn(node string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	for _, p := range f.idx.Placements {
		if p.Node == node {
			n++
		}
	}
	return n
}

// Mark returns a node's last barrier mark.
func (f *FSM) Mark(node string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.idx.Marks[node]
}

// PendingClaimHolders returns the nodes whose attempts hold a pending claim
// of fingerprint, in any scope (almost always none or one): attempts that
// may still finish there. One pass over the claims, since a keyed create
// asks it on every placement.
func (f *FSM) PendingClaimHolders(fingerprint string) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for _, r := range f.idx.Claims {
		if r.Fingerprint == fingerprint && r.State == claimPending && r.Node != "" && !slices.Contains(out, r.Node) {
			out = append(out, r.Node)
		}
	}
	slices.Sort(out)
	return out
}
