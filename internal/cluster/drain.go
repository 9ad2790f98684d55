package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandpit-dev/sandpit"
)

// Drain and capacity are decided in the replicated index, not by gossip: a
// drain must hold on every node at once and survive restarts, and a node's
// ceiling must hold however many nodes place creates on it concurrently. The
// log orders those creates, so Apply counting the node's placements is the
// one place where "is there room?" is answered.

// setDrain sets or clears a node's drain flag. A member that gossip knows
// but the leader has not registered yet gets an entry holding only the
// flag; its registration fills in the addresses and keeps the flag.
func (x *Index) setDrain(c command) Result {
	if c.Node == "" {
		return Result{Err: ErrInvalidCommand}
	}
	n, ok := x.Nodes[c.Node]
	if !ok {
		n = Node{ID: c.Node}
	}
	n.Draining = c.Drain
	x.Nodes[c.Node] = n
	return Result{}
}

// admits reports whether a new placement may go on node: not when the node
// is drained, nor when it already owns its --max-sandboxes placements. A
// node not (yet) registered has announced no ceiling.
func (x *Index) admits(node string) error {
	n, ok := x.Nodes[node]
	if !ok {
		return nil
	}
	if n.Draining {
		return fmt.Errorf("node %s is drained: %w", node, sandpit.ErrNoCapacity)
	}
	if n.MaxSandboxes <= 0 {
		return nil
	}
	held := 0
	for _, p := range x.Placements {
		if p.Node == node {
			held++
		}
	}
	if held >= n.MaxSandboxes {
		return fmt.Errorf("node %s holds %d of its %d sandboxes: %w", node, held, n.MaxSandboxes, sandpit.ErrNoCapacity)
	}
	return nil
}

// Node returns a registered node.
func (f *FSM) Node(id string) (Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.idx.Nodes[id]
	return n, ok
}

// SetDrain commits a node's drain flag; sandpit.ErrNotFound when no node of
// that name is registered (and then nothing changes).
func (r *Replica) SetDrain(ctx context.Context, node string, drain bool) error {
	return r.do(ctx, command{Op: opSetDrain, Node: node, Drain: drain})
}

// Drain stops (drain true) or restores (false) new placements on node.
func (c *Cluster) Drain(ctx context.Context, node string, drain bool) error {
	_, known := c.rep.fsm.Node(node)
	for _, m := range c.gossip.Members() {
		known = known || m.Name == node && m.State != "left"
	}
	if !known {
		// A name no node has: refused before anything is written.
		return fmt.Errorf("node %q: %w", node, sandpit.ErrNotFound)
	}
	return c.rep.SetDrain(ctx, node, drain)
}

// Admits reports whether the index, as this node has applied it, would let
// node take one more placement: nil, or an error wrapping
// sandpit.ErrNoCapacity.
func (f *FSM) Admits(node string) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.idx.admits(node)
}

// placeable reports whether the index lets node take a new placement now;
// candidates() and the keyed-create rendezvous both ask it, so placement is
// decided by the same rule Apply enforces.
func (c *Cluster) placeable(node string) bool {
	return c.rep.fsm.Admits(node) == nil
}

// ErrBadRequest marks a malformed operator request to a cluster endpoint.
var ErrBadRequest = errors.New("bad cluster request")
