package service

import (
	"context"
	"errors"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// In a cluster, names and custom hostnames must be unique across every
// node's store, which no single SQLite file can enforce. The replicated index
// (Config.Cluster) decides them first: a create reserves its id and name
// there before it touches its own store, and a delete frees them after. A
// daemon without --cluster runs singleNode, for which all of this is
// nothing.

// clusterMode is how cluster mode enters the service: the reservation and
// release of ids, names and hostnames, the placement of this node's
// sandboxes, and the replication of their specs. singleNode is a daemon on
// its own; replicated is a node of a cluster, over Config.Cluster.
type clusterMode interface {
	// clustered reports whether this daemon is a node of a cluster.
	clustered() bool
	// reserve takes sb's id and name cluster-wide and places it on this
	// node; sandpit.ErrNameConflict when another node's sandbox holds the
	// name.
	reserve(ctx context.Context, sb sandpit.Sandbox) error
	// release frees a sandbox's id, name and hostnames cluster-wide.
	release(ctx context.Context, id string)
	// bind binds a custom hostname cluster-wide before the local store
	// records it; unbind frees it.
	bind(ctx context.Context, id, host string) error
	unbind(ctx context.Context, id, host string)
	// publishSpec writes a sandbox's spec to its placement; specChanged
	// republishes it after a change that succeeded (*err == nil).
	publishSpec(ctx context.Context, id string, user *string)
	specChanged(ctx context.Context, id string, err *error)
	// reconcile, sync and dropStale are ReconcileCluster, SyncWithCluster
	// and DropStale.
	reconcile(ctx context.Context, since time.Time, keep time.Duration) error
	sync(ctx context.Context) error
	dropStale(ctx context.Context) error
}

// singleNode is a daemon on its own: its store alone decides names and
// hostnames, and there is nothing to place or replicate.
type singleNode struct{}

func (singleNode) clustered() bool                                           { return false }
func (singleNode) reserve(context.Context, sandpit.Sandbox) error            { return nil }
func (singleNode) release(context.Context, string)                           {}
func (singleNode) bind(context.Context, string, string) error                { return nil }
func (singleNode) unbind(context.Context, string, string)                    {}
func (singleNode) publishSpec(context.Context, string, *string)              {}
func (singleNode) specChanged(context.Context, string, *error)               {}
func (singleNode) reconcile(context.Context, time.Time, time.Duration) error { return nil }
func (singleNode) sync(context.Context) error                                { return nil }
func (singleNode) dropStale(context.Context) error                           { return nil }

// replicated is a node of a cluster: r is the replicated index, s the
// node's service, whose sandboxes it places, re-creates and drops.
type replicated struct {
	s *Service
	r *cluster.Replica
}

func (*replicated) clustered() bool { return true }

var _ idempotency.ClaimStore = (*cluster.ClaimStore)(nil)

// claimStore is where the idempotency engine keeps its claims: the
// replicated index in a cluster, so that a retry reaching any node finds the
// claim its first attempt made on another; the SQLite store otherwise.
func claimStore(cfg Config, st *store.Store) idempotency.ClaimStore {
	if cfg.Cluster != nil {
		return cfg.Cluster.Claims()
	}
	return st
}

// reserve takes sb's id and name cluster-wide and places it on this
// node. It returns sandpit.ErrNameConflict when another node's sandbox holds
// the name.
func (c *replicated) reserve(ctx context.Context, sb sandpit.Sandbox) error {
	s := c.s
	// One entry reserves and places, so a crash never leaves a reservation
	// without the node whose restart must clean it up.
	return c.r.Reserve(ctx, cluster.Reservation{
		SandboxID: sb.ID, Name: sb.Name, Owner: sb.Owner, Labels: sb.Labels, Image: sb.Image, Node: s.cfg.NodeName,
	})
}

// ReconcileCluster releases the placements on this node that have no row in
// its store: a create that reserved its name and then died with the daemon
// before it recorded the sandbox locally (or whose rollback could not reach
// the cluster). Only placements made before since are considered, so creates
// running now are left alone. The daemon runs it once the node has a leader.
func (s *Service) ReconcileCluster(ctx context.Context, since time.Time, keep time.Duration) error {
	return s.cluster.reconcile(ctx, since, keep)
}

func (c *replicated) reconcile(ctx context.Context, since time.Time, keep time.Duration) error {
	s := c.s
	// The claims this node's previous run held are not running any more:
	// free them for their retries now, as the SQLite store's
	// ExpirePendingClaims does on a single node, keeping each for keep.
	if err := c.r.ExpireNodeClaims(ctx, s.cfg.NodeName, since, keep); err != nil {
		return err
	}
	for _, p := range c.r.FSM().Placements(nil) {
		// A sandbox being re-created here has no row until its re-creation
		// makes one; that is not an interrupted create.
		if p.Node != s.cfg.NodeName || p.State == cluster.PlacementRecreating || !p.CreatedAt.Before(since) {
			continue
		}
		_, err := s.store.GetSandbox(ctx, p.SandboxID)
		if err == nil {
			continue
		}
		if !errors.Is(err, sandpit.ErrNotFound) {
			return err
		}
		s.log.Warn("reconcile: releasing cluster placement without a sandbox", "sandbox", p.SandboxID, "name", p.Name)
		if err := c.r.Delete(ctx, p.SandboxID); err != nil {
			return err
		}
	}
	return nil
}

// release frees a sandbox's id, name and hostnames cluster-wide. It
// runs in rollbacks and after deletes, so it must not be cut short by the
// caller's cancellation; a failure is logged, since the sandbox is gone
// here either way.
func (c *replicated) release(ctx context.Context, id string) {
	s := c.s
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// Only this node's own placement is freed: a copy that went stale here
	// while the sandbox moved to another node must not free the new copy's
	// name.
	if err := c.r.Release(rctx, id); err != nil {
		s.log.Error("cluster: release sandbox", "sandbox", id, "err", err)
	}
}

// bind binds a custom hostname cluster-wide before the local store
// records it; sandpit.ErrHostnameConflict when another sandbox holds it.
func (c *replicated) bind(ctx context.Context, id, host string) error {
	return c.r.AddHostname(ctx, id, host)
}

// unbind frees a custom hostname cluster-wide.
func (c *replicated) unbind(ctx context.Context, id, host string) {
	s := c.s
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.r.RemoveHostname(rctx, id, host); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		s.log.Error("cluster: unbind hostname", "hostname", host, "err", err)
	}
}
