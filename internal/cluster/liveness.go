package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNodeDown ends a forward whose target gossip has declared dead.
var ErrNodeDown = errors.New("declared dead by gossip")

// downConfirm is how long a node must stay dead in gossip before the
// forwards to it end: a loaded node can be declared dead and refute it a
// moment later, and the requests it was serving then must not be cut.
const downConfirm = 2 * time.Second

// liveness keeps, per node, a context that ends when gossip has declared
// the node dead or gone and it stayed so for the confirmation time. A
// request forwarded over a pooled connection waits for the target's answer,
// and a frozen node (stopped, or cut off after the connection was made)
// neither answers nor closes the connection; a timeout on the answer would
// cut long execs and streams short. Tying each forward to its target's
// liveness ends it when the cluster agrees the target is dead, and only
// then.
type liveness struct {
	confirm time.Duration // downConfirm when zero
	mu      sync.Mutex
	nodes   map[string]*nodeLife
	dead    map[string]bool // confirmed dead and not back since
}

type nodeLife struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	// timer, while set, confirms the node's death when it fires.
	timer *time.Timer
}

// life returns node's current life, made on first use. Called with mu held.
func (l *liveness) life(node string) *nodeLife {
	if l.nodes == nil {
		l.nodes, l.dead = map[string]*nodeLife{}, map[string]bool{}
	}
	life := l.nodes[node]
	if life == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		life = &nodeLife{ctx: ctx, cancel: cancel}
		l.nodes[node] = life
	}
	return life
}

// of returns the context of node's current life, and whether node is
// confirmed dead now.
func (l *liveness) of(node string) (context.Context, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.life(node).ctx, l.dead[node]
}

// down starts the confirmation of node's death: unless up is called first,
// its life ends once the confirmation time has passed, and the next life
// starts confirmed dead.
func (l *liveness) down(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	life := l.life(node)
	if life.timer != nil {
		return
	}
	confirm := l.confirm
	if confirm <= 0 {
		confirm = downConfirm
	}
	var t *time.Timer
	t = time.AfterFunc(confirm, func() {
		l.mu.Lock()
		if life.timer != t {
			// The node came back meanwhile.
			l.mu.Unlock()
			return
		}
		delete(l.nodes, node)
		l.dead[node] = true
		l.mu.Unlock()
		life.cancel(fmt.Errorf("node %s %w", node, ErrNodeDown))
	})
	life.timer = t
}

// up records that gossip sees node alive (again): a pending confirmation
// of its death is dropped, and forwards to it are let through.
func (l *liveness) up(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if life := l.nodes[node]; life != nil && life.timer != nil {
		life.timer.Stop()
		life.timer = nil
	}
	delete(l.dead, node)
}

// untilDown returns ctx, ended as well once node is confirmed dead (at once
// if it is already), with the reason as its cause.
func (c *Cluster) UntilDown(ctx context.Context, node string) (context.Context, context.CancelFunc) {
	life, dead := c.lives.of(node)
	ctx, cancel := context.WithCancelCause(ctx)
	if dead {
		cancel(fmt.Errorf("node %s %w", node, ErrNodeDown))
		return ctx, func() {}
	}
	stop := context.AfterFunc(life, func() { cancel(context.Cause(life)) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// DownCause is the reason a forward failed: its target's death when that is
// what ended it, err otherwise.
func DownCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrNodeDown) {
		return cause
	}
	return err
}
