package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/events"
)

// When a cluster node dies, its SQLite file is gone with it; the leader may
// then ask another node to re-create the node's sandboxes. What that node
// needs travels in the replicated placement, as a recreateSpec the owner
// writes when a create completes and rewrites after every change of its
// exposures or custom domains. Env values are part of it, so they are in the
// Raft log (encrypted between nodes, 0600 on disk).

// recreateSpec is a placement's replicated spec. Only this package reads it;
// the cluster layer stores it as opaque JSON.
type recreateSpec struct {
	Image       string                `json:"image"`
	Template    string                `json:"template,omitempty"`
	Env         map[string]string     `json:"env,omitempty"`
	Labels      map[string]string     `json:"labels,omitempty"`
	User        string                `json:"user,omitempty"`
	CPU         float64               `json:"cpu,omitempty"`
	MemoryMB    int64                 `json:"memory_mb,omitempty"`
	DiskMB      int64                 `json:"disk_mb,omitempty"`
	EndAt       time.Time             `json:"end_at,omitzero"`
	AutoStop    int                   `json:"auto_stop,omitempty"`
	AutoArchive int                   `json:"auto_archive,omitempty"`
	AutoDelete  int                   `json:"auto_delete"`
	PortAccess  sandpit.PortAccess    `json:"port_access,omitempty"`
	Network     sandpit.NetworkPolicy `json:"network"`
	Ports       []specPort            `json:"ports,omitempty"`
	Domains     []specDomain          `json:"domains,omitempty"`
	// Revoked lists the signed preview tokens revoked before their expiry.
	// Every node of a cluster signs with the same key, so without them a
	// revoked token would work again on the sandbox's new owner.
	Revoked []specRevocation `json:"revoked,omitempty"`
	// State is "stopped" or "paused" for a sandbox its user stopped or
	// paused, which comes back so; empty for a running one. A paused one
	// comes back in PauseMode (memory: frozen anew after a cold start).
	State     sandpit.State     `json:"state,omitempty"`
	PauseMode sandpit.PauseMode `json:"pause_mode,omitempty"`
	// The deadline action and auto-resume of the create.
	OnTimeout  sandpit.OnTimeout `json:"on_timeout,omitempty"`
	KeepMemory bool              `json:"keep_memory,omitempty"`
	AutoResume bool              `json:"auto_resume,omitempty"`
}

type specRevocation struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

type specPort struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	// Private: the port is served only with a credential (a Daytona signed
	// preview URL was made for it), and comes back so.
	Private bool `json:"private,omitempty"`
}

type specDomain struct {
	Hostname string `json:"hostname"`
	Port     int    `json:"port"`
}

// publishSpec writes sandbox id's spec to its placement. user is the
// create's agent user, which the store does not keep: nil keeps the one the
// placement's spec has. A failure is logged: the sandbox works, it only
// could not be re-created from the latest spec.
func (c *replicated) publishSpec(ctx context.Context, id string, user *string) {
	s := c.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := c.writeSpec(ctx, id, user); err != nil {
		s.log.Warn("cluster: publish sandbox spec", "sandbox", id, "err", err)
	}
}

func (c *replicated) writeSpec(ctx context.Context, id string, user *string) error {
	s := c.s
	sb, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	spec := recreateSpec{
		Image: sb.Image, Template: sb.Template, Env: sb.Env, Labels: sb.Labels, CPU: sb.CPU, MemoryMB: sb.MemoryMB,
		DiskMB: sb.DiskMB, EndAt: sb.EndAt, AutoStop: sb.AutoStop, AutoArchive: sb.AutoArchive, AutoDelete: sb.AutoDelete,
		PortAccess: sb.PortAccess, Network: sb.Network,
		OnTimeout: sb.OnTimeout, KeepMemory: sb.KeepMemory, AutoResume: sb.AutoResume,
	}
	if sb.State == sandpit.StateStopped || sb.State == sandpit.StatePaused {
		spec.State = sb.State
		spec.PauseMode = sb.PauseMode
	}
	if user != nil {
		spec.User = *user
	} else if p, ok := c.r.FSM().Placement(id); ok && len(p.Spec) > 0 {
		var old recreateSpec
		if json.Unmarshal(p.Spec, &old) == nil {
			spec.User = old.User
		}
	}
	ports, err := s.store.ListPorts(ctx, id)
	if err != nil {
		return err
	}
	private, err := s.store.ListPrivatePorts(ctx, id)
	if err != nil {
		return err
	}
	for _, p := range ports {
		_, priv := private[p.Port]
		spec.Ports = append(spec.Ports, specPort{Port: p.Port, Protocol: p.Protocol, Private: priv})
	}
	domains, err := s.store.ListCustomDomains(ctx, id)
	if err != nil {
		return err
	}
	for _, d := range domains {
		spec.Domains = append(spec.Domains, specDomain{Hostname: d.Hostname, Port: d.Port})
	}
	revoked, err := s.store.ListPreviewRevocations(ctx, id, s.now())
	if err != nil {
		return err
	}
	for _, r := range revoked {
		spec.Revoked = append(spec.Revoked, specRevocation{Token: r.Token, ExpiresAt: r.ExpiresAt})
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return c.r.SetSpec(ctx, id, b)
}

// specChanged republishes a sandbox's spec after a change succeeded: of its
// exposures, domains or preview revocations, its state (stopped, paused,
// running), deadline, labels or lifecycle intervals. id may be its name.
// While the sandbox is being re-created here, the re-creation publishes
// once at its end instead, so that a crash midway never leaves a spec with
// half of the exposures.
func (c *replicated) specChanged(ctx context.Context, id string, err *error) {
	s := c.s
	if *err != nil {
		return
	}
	fsm := c.r.FSM()
	p, ok := fsm.Placement(id)
	if !ok {
		p, ok = fsm.PlacementByName(id)
	}
	if !ok || p.State != cluster.PlacementPlaced || p.Node != s.cfg.NodeName {
		return
	}
	c.publishSpec(ctx, p.SandboxID, nil)
}

// RunFailover keeps this node in step with what the cluster decided about
// its sandboxes, until ctx ends: it re-creates the sandboxes the leader
// placed here from a dead node, drops the local copies of sandboxes that
// the cluster moved elsewhere or deleted while this node was away (the
// replicated index is the tiebreaker, so no sandbox runs on two nodes), and
// takes back the sandboxes it lost while it was away.
func (s *Service) RunFailover(ctx context.Context, every time.Duration) {
	if !s.cluster.clustered() {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.SyncWithCluster(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("cluster: sync sandboxes with the index", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SyncWithCluster runs one round of RunFailover. The daemon also runs it once
// before it serves and before its reconcile restarts containers.
func (s *Service) SyncWithCluster(ctx context.Context) error { return s.cluster.sync(ctx) }

func (c *replicated) sync(ctx context.Context) error {
	s := c.s
	if err := c.dropStale(ctx); err != nil {
		return err
	}
	fsm := c.r.FSM()
	var errs []error
	reclaim := false
	recreating := map[string]bool{}
	for _, p := range fsm.Owned(s.cfg.NodeName) {
		switch p.State {
		case cluster.PlacementRecreating:
			recreating[p.SandboxID] = true
			errs = append(errs, c.recreateOrGiveUp(ctx, p))
		case cluster.PlacementLost:
			reclaim = true
		}
	}
	// Forget the failures of re-creations that ended otherwise (deleted
	// meanwhile, say).
	s.mu.Lock()
	for id := range s.recreateFailing {
		if !recreating[id] {
			delete(s.recreateFailing, id)
		}
	}
	s.mu.Unlock()
	if reclaim {
		// This node is back and sees its lost sandboxes nobody deleted:
		// they are its own again.
		s.log.Info("cluster: taking back the sandboxes lost while this node was away")
		errs = append(errs, c.r.Reclaim(ctx))
	}
	return errors.Join(errs...)
}

// recreateOrGiveUp re-creates p here; once its attempts have failed for
// RecreateGiveUp (an image this node lacks, say, fails every time) it
// removes what they left and makes the sandbox lost, so that its clients get
// 410 and its delete, rather than 503 and a retry forever.
func (c *replicated) recreateOrGiveUp(ctx context.Context, p cluster.Placement) error {
	s := c.s
	err := c.recreate(ctx, p)
	s.mu.Lock()
	first, failing := s.recreateFailing[p.SandboxID]
	switch {
	case err == nil || ctx.Err() != nil:
		delete(s.recreateFailing, p.SandboxID)
	case !failing:
		first = s.now()
		s.recreateFailing[p.SandboxID] = first
	}
	s.mu.Unlock()
	if err == nil || ctx.Err() != nil {
		return err
	}
	err = fmt.Errorf("re-create %s: %w", p.SandboxID, err)
	if s.now().Sub(first) < s.cfg.RecreateGiveUp {
		return err
	}
	s.log.Error("cluster: giving up re-creating a sandbox of a dead node; it is lost", "sandbox", p.SandboxID, "name", p.Name, "failing_since", first, "err", err)
	if derr := s.dropLocal(ctx, p.SandboxID); derr != nil && !errors.Is(derr, sandpit.ErrNotFound) {
		return errors.Join(err, derr)
	}
	if gerr := c.r.RecreateFailed(ctx, p.SandboxID); gerr != nil {
		return errors.Join(err, gerr)
	}
	s.mu.Lock()
	delete(s.recreateFailing, p.SandboxID)
	s.mu.Unlock()
	return nil
}

// staleAfter is how old a local sandbox must be before the index's silence
// about it may mean it is stale, so a create whose reservation this node's
// copy has not applied yet is never mistaken for one.
const staleAfter = 5 * time.Second

// DropStale removes, in a cluster, the local sandboxes whose placement is
// gone or names another node; the daemon runs it before it serves.
func (s *Service) DropStale(ctx context.Context) error { return s.cluster.dropStale(ctx) }

// dropStale removes the local sandboxes whose placement is gone or names
// another node. Candidates are confirmed after a read barrier, so a copy of
// the index that is merely behind never removes anything.
func (c *replicated) dropStale(ctx context.Context) error {
	s := c.s
	list, err := s.allSandboxes(ctx, nil)
	if err != nil {
		return err
	}
	fsm := c.r.FSM()
	stale := func(sb sandpit.Sandbox) bool {
		// A reservation no node holds yet is not another node's copy.
		p, ok := fsm.Placement(sb.ID)
		return !ok || (p.Node != "" && p.Node != s.cfg.NodeName)
	}
	var cands []sandpit.Sandbox
	for _, sb := range list {
		if s.now().Sub(sb.CreatedAt) > staleAfter && stale(sb) {
			cands = append(cands, sb)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	if err := c.r.CatchUp(ctx); err != nil {
		return err
	}
	var errs []error
	for _, sb := range cands {
		if !stale(sb) {
			continue
		}
		p, _ := fsm.Placement(sb.ID)
		s.log.Warn("cluster: removing a sandbox the cluster no longer places here", "sandbox", sb.ID, "name", sb.Name, "owner_node", p.Node)
		if err := s.dropLocal(ctx, sb.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropLocal removes this node's copy of a sandbox (container, routes, TCP
// listeners, firewall rules, rows) and leaves the cluster's bindings of its
// id, name and hostnames alone: they belong to the copy the index names, or
// were freed already.
func (s *Service) dropLocal(ctx context.Context, id string) error {
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	sb, err := s.store.GetSandbox(ctx, id)
	if errors.Is(err, sandpit.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer s.leave(id)()
	if err := s.teardown(ctx, sb); err != nil {
		return err
	}
	// The event says this node's copy went, not that the sandbox did: it
	// may live on the node the cluster placed it on.
	if err := s.removeRow(ctx, events.Dropped, sb); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		return err
	}
	return nil
}

// recreate makes, on this node, the sandbox the leader moved here from a
// dead node: the same id, name, labels, env, image and limits, a fresh
// filesystem, its HTTP exposures on the same ports, its TCP exposures on new
// host ports of this node, its custom domains bound here. It is re-entrant:
// a node that crashed midway finds the placement still recreating and
// finishes (a half-made copy is removed and made again).
func (c *replicated) recreate(ctx context.Context, p cluster.Placement) error {
	s := c.s
	var spec recreateSpec
	if err := json.Unmarshal(p.Spec, &spec); err != nil {
		return fmt.Errorf("decode spec: %w", err)
	}
	ctx = sandpit.WithPrincipal(ctx, sandpit.Principal{TokenName: "system", Owner: p.Owner, Admin: true})
	sb, err := s.store.GetSandbox(ctx, p.SandboxID)
	switch {
	case err == nil && spec.State != "" && sb.State == spec.State:
		// An earlier attempt made it, exposed its ports and stopped or
		// paused it as its spec says; only the bookkeeping below is left.
		return c.recreated(ctx, p, spec)
	case err == nil && sb.State == sandpit.StateRunning:
		// Made by an earlier attempt; its exposures are completed below.
	case err == nil:
		if err := s.dropLocal(ctx, p.SandboxID); err != nil {
			return err
		}
		fallthrough
	case errors.Is(err, sandpit.ErrNotFound):
		// A node whose --disk-mb is smaller takes the sandbox at its own
		// maximum rather than refusing it.
		req := CreateRequest{
			ID: p.SandboxID, Name: p.Name, Image: spec.Image, Template: spec.Template, Env: spec.Env, Labels: spec.Labels,
			CPU: spec.CPU, MemoryMB: spec.MemoryMB, DiskMB: min(spec.DiskMB, s.cfg.MaxDiskMB()), User: spec.User, PortAccess: spec.PortAccess,
			Network: spec.Network, AutoStop: &spec.AutoStop, AutoArchive: &spec.AutoArchive, AutoDelete: &spec.AutoDelete,
			OnTimeout: spec.OnTimeout, KeepMemory: spec.KeepMemory, AutoResume: spec.AutoResume,
			recreate: true,
		}
		if !spec.EndAt.IsZero() {
			req.Timeout = time.Until(spec.EndAt)
			if req.Timeout <= 0 {
				// It would have expired by now wherever it ran.
				s.log.Info("cluster: a failed-over sandbox expired meanwhile; deleting it", "sandbox", p.SandboxID)
				return c.r.Delete(ctx, p.SandboxID)
			}
		}
		s.log.Info("cluster: re-creating a sandbox of a dead node", "sandbox", p.SandboxID, "name", p.Name)
		if _, err := s.CreateSandbox(ctx, req); err != nil {
			return err
		}
	default:
		return err
	}
	// Revocations first: no exposure of the re-created sandbox ever serves
	// a token revoked on its old owner.
	now := s.now()
	for _, r := range spec.Revoked {
		if r.ExpiresAt.After(now) {
			if err := s.store.RevokePreviewToken(ctx, p.SandboxID, r.Token, r.ExpiresAt, now); err != nil {
				return fmt.Errorf("preview revocation: %w", err)
			}
		}
	}
	for _, port := range spec.Ports {
		var err error
		if port.Private && port.Protocol == ProtoHTTP {
			_, _, err = s.ExposePrivatePort(ctx, p.SandboxID, port.Port)
		} else {
			_, err = s.ExposePort(ctx, p.SandboxID, port.Port, port.Protocol)
		}
		if err != nil {
			return fmt.Errorf("expose %d/%s: %w", port.Port, port.Protocol, err)
		}
	}
	for _, d := range spec.Domains {
		if _, _, err := s.AddCustomDomain(ctx, p.SandboxID, d.Hostname, d.Port); err != nil {
			return fmt.Errorf("custom domain %s: %w", d.Hostname, err)
		}
	}
	// Stopped or paused by its user before its node died, it comes back so.
	switch spec.State {
	case sandpit.StateStopped:
		if _, err := s.StopSandbox(ctx, p.SandboxID); errors.Is(err, ErrDeletedOnStop) {
			// An ephemeral sandbox goes when it stops; its delete freed
			// the placement.
			return nil
		} else if err != nil {
			return fmt.Errorf("stop: %w", err)
		}
	case sandpit.StatePaused:
		if _, err := s.PauseSandbox(ctx, p.SandboxID, spec.PauseMode); err != nil {
			return fmt.Errorf("pause: %w", err)
		}
	}
	return c.recreated(ctx, p, spec)
}

// recreated publishes a re-created sandbox's spec and marks it placed here.
func (c *replicated) recreated(ctx context.Context, p cluster.Placement, spec recreateSpec) error {
	s := c.s
	if err := c.writeSpec(ctx, p.SandboxID, &spec.User); err != nil {
		return err
	}
	if err := c.r.Recreated(ctx, p.SandboxID); err != nil {
		return err
	}
	s.log.Info("cluster: re-created a sandbox of a dead node", "sandbox", p.SandboxID, "name", p.Name, "state", spec.State)
	return nil
}
