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
// daemon without --cluster has a nil index and none of this runs.

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

// clusterReserve takes sb's id and name cluster-wide and places it on this
// node. It returns sandpit.ErrNameConflict when another node's sandbox holds
// the name.
func (s *Service) clusterReserve(ctx context.Context, sb sandpit.Sandbox) error {
	if s.cfg.Cluster == nil {
		return nil
	}
	// One entry reserves and places, so a crash never leaves a reservation
	// without the node whose restart must clean it up.
	return s.cfg.Cluster.Reserve(ctx, cluster.Reservation{
		SandboxID: sb.ID, Name: sb.Name, Owner: sb.Owner, Labels: sb.Labels, Image: sb.Image, Node: s.cfg.NodeName,
	})
}

// ReconcileCluster releases the placements on this node that have no row in
// its store: a create that reserved its name and then died with the daemon
// before it recorded the sandbox locally (or whose rollback could not reach
// the cluster). Only placements made before since are considered, so creates
// running now are left alone. The daemon runs it once the node has a leader.
func (s *Service) ReconcileCluster(ctx context.Context, since time.Time, keep time.Duration) error {
	if s.cfg.Cluster == nil {
		return nil
	}
	// The claims this node's previous run held are not running any more:
	// free them for their retries now, as the SQLite store's
	// ExpirePendingClaims does on a single node, keeping each for keep.
	if err := s.cfg.Cluster.ExpireNodeClaims(ctx, s.cfg.NodeName, since, keep); err != nil {
		return err
	}
	for _, p := range s.cfg.Cluster.FSM().Placements(nil) {
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
		if err := s.cfg.Cluster.Delete(ctx, p.SandboxID); err != nil {
			return err
		}
	}
	return nil
}

// clusterRelease frees a sandbox's id, name and hostnames cluster-wide. It
// runs in rollbacks and after deletes, so it must not be cut short by the
// caller's cancellation; a failure is logged, since the sandbox is gone
// here either way.
func (s *Service) clusterRelease(ctx context.Context, id string) {
	if s.cfg.Cluster == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// Only this node's own placement is freed: a copy that went stale here
	// while the sandbox moved to another node must not free the new copy's
	// name.
	if err := s.cfg.Cluster.Release(rctx, id); err != nil {
		s.log.Error("cluster: release sandbox", "sandbox", id, "err", err)
	}
}

// clusterBind binds a custom hostname cluster-wide before the local store
// records it; sandpit.ErrHostnameConflict when another sandbox holds it.
func (s *Service) clusterBind(ctx context.Context, id, host string) error {
	if s.cfg.Cluster == nil {
		return nil
	}
	return s.cfg.Cluster.AddHostname(ctx, id, host)
}

// clusterUnbind frees a custom hostname cluster-wide.
func (s *Service) clusterUnbind(ctx context.Context, id, host string) {
	if s.cfg.Cluster == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.cfg.Cluster.RemoveHostname(rctx, id, host); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		s.log.Error("cluster: unbind hostname", "hostname", host, "err", err)
	}
}
