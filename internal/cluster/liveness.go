package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// errNodeDown ends a forward whose target gossip has declared dead.
var errNodeDown = errors.New("declared dead by gossip")

// liveness keeps, per node, a context that ends when gossip declares the
// node dead or gone. A request forwarded over a pooled connection waits for
// the target's answer, and a frozen node (stopped, or cut off after the
// connection was made) neither answers nor closes the connection; a timeout
// on the answer would cut long execs and streams short. Tying each forward
// to its target's liveness ends it when the cluster agrees the target is
// dead, and only then.
type liveness struct {
	mu    sync.Mutex
	nodes map[string]*nodeLife
}

type nodeLife struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// of returns the context of node's current life, which ends when node is
// next declared down.
func (l *liveness) of(node string) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nodes == nil {
		l.nodes = map[string]*nodeLife{}
	}
	life := l.nodes[node]
	if life == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		life = &nodeLife{ctx: ctx, cancel: cancel}
		l.nodes[node] = life
	}
	return life.ctx
}

// down ends node's current life; the next call of of starts another, for
// the node once it is back.
func (l *liveness) down(node string) {
	l.mu.Lock()
	life := l.nodes[node]
	delete(l.nodes, node)
	l.mu.Unlock()
	if life != nil {
		life.cancel(fmt.Errorf("node %s %w", node, errNodeDown))
	}
}

// untilDown returns ctx, ended as well when gossip declares node dead or
// gone (at once if it already has), with the reason as its cause.
func (c *Cluster) untilDown(ctx context.Context, node string) (context.Context, context.CancelFunc) {
	life := c.lives.of(node)
	ctx, cancel := context.WithCancelCause(ctx)
	if c.gossip.Gone(node) {
		cancel(fmt.Errorf("node %s %w", node, errNodeDown))
		return ctx, func() {}
	}
	stop := context.AfterFunc(life, func() { cancel(context.Cause(life)) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// downCause is the reason a forward failed: its target's death when that is
// what ended it, err otherwise.
func downCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, errNodeDown) {
		return cause
	}
	return err
}
