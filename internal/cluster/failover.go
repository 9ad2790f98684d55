package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Failover policies: what the leader commits for the sandboxes of a node
// that stayed dead for the grace period.
const (
	// FailoverOrphan leaves them lost: every call answers 410 until the
	// user deletes them or their node comes back.
	FailoverOrphan = "orphan"
	// FailoverRecreate re-creates each on a healthy node from its
	// replicated spec, under the same id and name.
	FailoverRecreate = "recreate"
)

// DefaultDeadNodeGrace is how long a node stays dead in gossip before the
// leader applies the failover policy to its sandboxes.
const DefaultDeadNodeGrace = 30 * time.Second

// ValidFailover checks a --failover value.
func ValidFailover(policy string) error {
	switch policy {
	case FailoverOrphan, FailoverRecreate:
		return nil
	}
	return fmt.Errorf("invalid --failover %q: want %q or %q", policy, FailoverOrphan, FailoverRecreate)
}

// applyFailover applies the failover operations. Like every other operation
// it reads only the entry: the leader decided the targets before proposing.
func (x *Index) applyFailover(c command) Result {
	switch c.Op {
	case opSetSpec:
		p, ok := x.Placements[c.SandboxID]
		if !ok {
			return Result{Err: fmt.Errorf("set spec of %s: %w", c.SandboxID, sandpit.ErrNotFound)}
		}
		// Only the owner describes its sandbox: a node that lost it (and
		// has not noticed yet) must not overwrite the new owner's spec.
		if p.Node != c.Node {
			return Result{Err: fmt.Errorf("set spec of %s: owned by %s, not %s: %w", c.SandboxID, p.Node, c.Node, sandpit.ErrNotFound)}
		}
		p.Spec = append(json.RawMessage(nil), c.Spec...)
		return Result{}
	case opFailNode:
		if c.Failed == "" {
			return Result{Err: ErrInvalidCommand}
		}
		// In id order, because each move counts against its target's room:
		// every replica must fill the targets in the same order. The leader
		// chose targets with room, but the index has the last word, so a
		// target that filled up or was drained since leaves the sandbox
		// lost rather than overshooting its --max-sandboxes.
		for _, id := range slices.Sorted(maps.Keys(x.Placements)) {
			p := x.Placements[id]
			if p.Node != c.Failed || (p.State != PlacementPlaced && p.State != PlacementRecreating) {
				continue
			}
			if t := c.Targets[id]; t != "" && t != c.Failed && len(p.Spec) > 0 && x.admits(t) == nil {
				p.Node, p.State = t, PlacementRecreating
				continue
			}
			p.State = PlacementLost
		}
		x.handOverClaims(c)
		return Result{}
	case opRecreated:
		p, ok := x.Placements[c.SandboxID]
		if !ok || p.Node != c.Node || (p.State != PlacementRecreating && p.State != PlacementPlaced) {
			return Result{Err: fmt.Errorf("recreated %s on %s: %w", c.SandboxID, c.Node, sandpit.ErrNotFound)}
		}
		p.State = PlacementPlaced
		return Result{}
	case opRecreateFailed:
		// The node chosen to re-create the sandbox gave up: it is lost, and
		// held by no node, so that no node takes it back as its own; its
		// delete frees its id, name and hostnames as for any lost sandbox.
		p, ok := x.Placements[c.SandboxID]
		if !ok || p.Node != c.Node || p.State != PlacementRecreating {
			return Result{Err: fmt.Errorf("give up re-creating %s on %s: %w", c.SandboxID, c.Node, sandpit.ErrNotFound)}
		}
		p.Node, p.State = "", PlacementLost
		return Result{}
	case opReclaim:
		// The node came back: what it lost and nobody deleted or re-created
		// is its own again.
		for _, p := range x.Placements {
			if p.Node == c.Node && p.State == PlacementLost {
				p.State = PlacementPlaced
			}
		}
		return Result{}
	case opRelease:
		// A release by a node that no longer owns the sandbox (its copy went
		// stale while the sandbox moved) leaves the new owner's placement.
		if p, ok := x.Placements[c.SandboxID]; ok && (p.Node == c.Node || p.Node == "" || p.State == PlacementReserved) {
			x.deletePlacement(c.SandboxID)
		}
		return Result{}
	}
	return Result{Err: fmt.Errorf("%w: unknown op %q", ErrInvalidCommand, c.Op)}
}

// SetSpec records the spec a node needs to re-create a sandbox this node
// owns.
func (r *Replica) SetSpec(ctx context.Context, sandboxID string, spec json.RawMessage) error {
	return r.do(ctx, command{Op: opSetSpec, SandboxID: sandboxID, Spec: spec})
}

// Recreated marks a sandbox this node re-created as placed here.
func (r *Replica) Recreated(ctx context.Context, sandboxID string) error {
	return r.do(ctx, command{Op: opRecreated, SandboxID: sandboxID})
}

// RecreateFailed gives up re-creating, on this node, a sandbox of a dead
// node: the sandbox becomes lost.
func (r *Replica) RecreateFailed(ctx context.Context, sandboxID string) error {
	return r.do(ctx, command{Op: opRecreateFailed, SandboxID: sandboxID})
}

// Reclaim makes this node's lost sandboxes placed again, when it is back.
func (r *Replica) Reclaim(ctx context.Context) error {
	return r.do(ctx, command{Op: opReclaim})
}

// Release frees a sandbox's id, name and hostnames if this node owns it (or
// nobody does yet); a sandbox that moved to another node keeps them.
func (r *Replica) Release(ctx context.Context, sandboxID string) error {
	return r.do(ctx, command{Op: opRelease, SandboxID: sandboxID})
}

// failNode commits what becomes of a dead node's sandboxes and of the
// idempotency claims its attempts held; keep is how long those claims stay
// for their retries.
func (r *Replica) failNode(ctx context.Context, node string, targets map[string]string, keep time.Duration) error {
	return r.do(ctx, command{Op: opFailNode, Failed: node, Targets: targets, Keep: keep})
}

// handOverClaims ends the attempts a failed node held. They can never
// finish there, and a retry that waited for the node would wait forever, so
// their locks end now and each claim is handed to the node its sandbox was
// moved to (a retry goes there and takes the attempt over, finding the
// re-created sandbox under the claim's target id), or to no node when its
// sandbox was not moved (a retry then goes to any live node; the target's
// lost placement answers it). Generation and target stay, as when a node
// restarts, so a retry never makes a second sandbox, and the claim is kept
// for keep so that reaping cannot forget it first.
func (x *Index) handOverClaims(c command) {
	for _, r := range x.Claims {
		if r.State != claimPending || r.Node != c.Failed {
			continue
		}
		if r.LockedUntil.After(c.At) {
			r.LockedUntil = c.At
		}
		if keep := c.At.Add(c.Keep); keep.After(r.ReplayUntil) {
			r.ReplayUntil = keep
		}
		r.Node = ""
		if p := x.Placements[r.TargetID]; r.TargetID != "" && p != nil && p.State == PlacementRecreating {
			r.Node = p.Node
		}
	}
}

// Owned lists the placements on node, in creation order.
func (f *FSM) Owned(node string) []Placement {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Placement
	for _, p := range f.idx.Placements {
		if p.Node == node {
			out = append(out, p.clone())
		}
	}
	sortPlacements(out)
	return out
}

// holdsPendingClaims reports whether an attempt of node holds a pending
// idempotency claim: work for the failover too, even without a placement
// (a node may die between its claim and its reservation).
func (f *FSM) holdsPendingClaims(node string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, r := range f.idx.Claims {
		if r.Node == node && r.State == claimPending {
			return true
		}
	}
	return false
}

// hasLive reports whether node owns a placed or recreating sandbox: work for
// the failover policy.
func (f *FSM) hasLive(node string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, p := range f.idx.Placements {
		if p.Node == node && (p.State == PlacementPlaced || p.State == PlacementRecreating) {
			return true
		}
	}
	return false
}

// detectDead runs on the leader at every turn of its loop. It remembers
// since when each registered node has been down in gossip (dead, suspect, or
// unknown to it, but not left) and, once one has stayed down for the grace
// period, commits the failover policy for its sandboxes. A node seen alive
// again is forgotten; a new leader starts every clock afresh, so a leadership
// change can only delay a failover, never hasten it.
func (c *Cluster) detectDead(ctx context.Context, now time.Time) {
	if c.downSince == nil {
		c.downSince = map[string]time.Time{}
	}
	state := map[string]string{}
	for _, m := range c.gossip.Members() {
		state[m.Name] = m.State
	}
	grace := c.cfg.DeadNodeGrace
	if grace <= 0 {
		grace = DefaultDeadNodeGrace
	}
	registered := map[string]bool{}
	for _, n := range c.rep.fsm.Nodes() {
		registered[n.ID] = true
		st := state[n.ID]
		if n.ID == c.cfg.NodeName || st == "alive" || st == "left" {
			delete(c.downSince, n.ID)
			continue
		}
		since, ok := c.downSince[n.ID]
		if !ok {
			c.downSince[n.ID] = now
			continue
		}
		if now.Sub(since) < grace || !c.rep.fsm.hasLive(n.ID) && !c.rep.fsm.holdsPendingClaims(n.ID) {
			continue
		}
		targets := c.failoverTargets(n.ID)
		c.log.Warn("cluster: node dead past the grace period, failing over its sandboxes",
			"dead", n.ID, "down_for", now.Sub(since).Round(time.Second), "policy", c.policy(), "recreating", len(targets))
		if err := c.rep.failNode(ctx, n.ID, targets, c.claimRetention()); err != nil && ctx.Err() == nil {
			c.log.Warn("cluster: fail over node", "dead", n.ID, "err", err)
		}
	}
	for id := range c.downSince {
		if !registered[id] {
			delete(c.downSince, id)
		}
	}
}

// claimRetention is how long the claims of a failed node's attempts are kept
// for their retries: the daemon's idempotency retention.
func (c *Cluster) claimRetention() time.Duration {
	if c.cfg.ClaimRetention > 0 {
		return c.cfg.ClaimRetention
	}
	return 24 * time.Hour
}

func (c *Cluster) policy() string {
	if c.cfg.Failover == "" {
		return FailoverOrphan
	}
	return c.cfg.Failover
}

// failoverTargets chooses, under the recreate policy, a node for each
// re-creatable sandbox of the dead node, from the same candidates as new
// creates; each choice counts against its node's room, so a batch never
// overfills one. A sandbox left without a target becomes lost.
func (c *Cluster) failoverTargets(dead string) map[string]string {
	if c.policy() != FailoverRecreate {
		return nil
	}
	cands := slices.DeleteFunc(c.candidates(), func(m Member) bool { return m.Name == dead })
	targets := map[string]string{}
	for _, p := range c.rep.fsm.Owned(dead) {
		if len(p.Spec) == 0 || (p.State != PlacementPlaced && p.State != PlacementRecreating) {
			continue
		}
		best := -1
		for i, m := range cands {
			if m.Meta.Free() <= 0 {
				continue
			}
			if best < 0 || m.Meta.Free() > cands[best].Meta.Free() ||
				m.Meta.Free() == cands[best].Meta.Free() && m.Name < cands[best].Name {
				best = i
			}
		}
		if best < 0 {
			break
		}
		targets[p.SandboxID] = cands[best].Name
		cands[best].Meta.Running++
	}
	return targets
}
