package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// Config is what `sandpit serve --cluster` gives the cluster layer.
type Config struct {
	NodeName string
	DataDir  string // the daemon's; Raft keeps <DataDir>/raft
	// RaftListen is the cluster port: Raft, forwarded entries and forwarded
	// API requests, all over TLS keyed by the cluster key.
	RaftListen string
	// ConnLimits bound the connections the cluster port holds (see Listen),
	// and, apart, those of the gossip port.
	ConnLimits   httpguard.ConnLimits
	GossipListen string
	// Advertise is the host other nodes reach this one at; empty uses the
	// listen addresses' hosts.
	Advertise       string
	Join            []string // gossip addresses of existing members
	Bootstrap       bool     // form a one-node cluster if this node has no state
	BootstrapExpect int      // form the cluster once this many members gossip
	Keys            Keys
	// Self is this node's API, proxy and public addresses, registered in the
	// replicated index.
	Self Node
	// Capacity reports how many sandboxes this node runs and its limit
	// (0 = none), gossiped for placement.
	Capacity func() (running, max int)
	// ClaimRetention is how long idempotency claims are kept (the daemon's
	// --idempotency-retention); the claims of a failed node's attempts are
	// kept this long for their retries.
	ClaimRetention time.Duration
	// MaxSandboxes is this node's --max-sandboxes (0 = no cap), gossiped so
	// that placement never picks a full node.
	MaxSandboxes int
	Logger       *slog.Logger
	// DeadNodeGrace is how long a node stays dead in gossip before the
	// leader applies Failover to its sandboxes (default 30 s).
	DeadNodeGrace time.Duration
	// Failover is FailoverOrphan (default) or FailoverRecreate.
	Failover string
	// Fast shortens Raft's and gossip's timers (tests on one machine).
	Fast bool
}

// Cluster is one node's membership in the cluster: its cluster port, its
// gossip and its Raft replica, and the loops that keep them in agreement.
type Cluster struct {
	cfg       Config
	mux       *Mux
	gossip    *Membership
	rep       *Replica
	log       *slog.Logger
	changed   chan struct{}
	stop      context.CancelFunc
	wg        sync.WaitGroup
	leaving   chan struct{}
	once      sync.Once
	rejoining atomic.Bool
	// pending counts the creates this node is forwarding, per target.
	pending struct {
		sync.Mutex
		n map[string]int
	}
	// lives ends the forwards to a node once gossip has declared it dead.
	lives liveness
	// downSince is, on the leader, since when each registered node has been
	// down in gossip; only the run loop touches it.
	downSince map[string]time.Time
}

// Start opens the cluster port and gossip, starts Raft from <DataDir>/raft,
// joins the given members (retrying in the background until one answers) and
// bootstraps when told to.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("cluster: --node-name is required")
	}
	if cfg.Bootstrap && cfg.BootstrapExpect > 0 {
		return nil, errors.New("cluster: give --bootstrap or --bootstrap-expect, not both")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("node", cfg.NodeName)
	raftAdv, err := advertised(cfg.RaftListen, cfg.Advertise)
	if err != nil {
		return nil, fmt.Errorf("--raft-listen: %w", err)
	}
	mux, err := Listen(cfg.RaftListen, raftAdv, cfg.Keys, cfg.ConnLimits, log)
	if err != nil {
		return nil, err
	}
	// With port 0 the real port is known only now.
	if raftAdv == "" || isPortZero(raftAdv) {
		raftAdv = mux.ln.Addr().String()
		mux.adv = mux.ln.Addr()
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  mux.RaftLayer(),
		MaxPool: 4,
		Timeout: 5 * time.Second,
		Logger:  hclogFor(log, "raft-net"),
	})
	rcfg := ReplicaConfig{
		NodeID:    cfg.NodeName,
		Dir:       filepath.Join(cfg.DataDir, "raft"),
		Transport: trans,
		Forward:   mux.Forwarder(),
		Logger:    log,
	}
	if cfg.Fast {
		rcfg.Tune = func(c *raft.Config) {
			c.HeartbeatTimeout = 300 * time.Millisecond
			c.ElectionTimeout = 300 * time.Millisecond
			c.LeaderLeaseTimeout = 150 * time.Millisecond
		}
	}
	rep, err := NewReplica(rcfg)
	if err != nil {
		mux.Close()
		return nil, err
	}
	mux.SetApply(rep.ApplyLocal)

	c := &Cluster{
		cfg: cfg, mux: mux, rep: rep, log: log,
		changed: make(chan struct{}, 1),
		leaving: make(chan struct{}),
	}
	c.cfg.Self.ID = cfg.NodeName
	c.cfg.Self.RaftAddr = raftAdv
	gossipAdv, err := advertised(cfg.GossipListen, cfg.Advertise)
	if err != nil {
		c.closeRaft()
		return nil, fmt.Errorf("--gossip-listen: %w", err)
	}
	g, err := StartMembership(MembershipConfig{
		NodeName: cfg.NodeName, Bind: cfg.GossipListen, Advertise: gossipAdv, Keys: cfg.Keys,
		Meta: c.meta, OnChange: c.poke, OnDown: c.lives.down, OnUp: c.lives.up, Logger: log, Fast: cfg.Fast,
		ConnLimits: cfg.ConnLimits,
	})
	if err != nil {
		c.closeRaft()
		return nil, err
	}
	c.gossip = g

	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.stop = cancel
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		if err := g.Join(bg, cfg.Join); err != nil && bg.Err() == nil {
			log.Error("cluster: join", "err", err)
		}
		c.poke()
	}()
	go func() {
		defer c.wg.Done()
		c.run(bg)
	}()
	return c, nil
}

func isPortZero(addr string) bool {
	_, p, err := net.SplitHostPort(addr)
	return err == nil && p == "0"
}

// advertised is listen with its host replaced by advertise, when given.
func advertised(listen, advertise string) (string, error) {
	h, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if advertise != "" {
		h = advertise
	}
	if h == "" || h == "0.0.0.0" || h == "::" {
		return "", fmt.Errorf("listening on %q needs --advertise", listen)
	}
	return net.JoinHostPort(h, p), nil
}

func (c *Cluster) meta() Meta {
	m := Meta{API: c.cfg.Self.APIAddr, Raft: c.cfg.Self.RaftAddr, Proxy: c.cfg.Self.ProxyAddr, Public: c.cfg.Self.PublicHost, Expect: c.cfg.BootstrapExpect}
	if c.cfg.Capacity != nil {
		m.Running, m.Max = c.cfg.Capacity()
	} else {
		m.Running, m.Max = c.rep.fsm.CountOn(c.cfg.NodeName), c.cfg.MaxSandboxes
	}
	return m
}

func (c *Cluster) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// run bootstraps when due, and while this node leads keeps the Raft
// configuration and the registered nodes in step with gossip, and reaps
// expired claims.
func (c *Cluster) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastReap := time.Now()
	lastRejoin := time.Now()
	gossiped := -1
	for {
		if time.Since(lastRejoin) > 3*time.Second {
			lastRejoin = time.Now()
			// A join to a node that is down waits out a dial timeout;
			// it must not hold up the leader's work.
			if c.rejoining.CompareAndSwap(false, true) {
				go func() {
					defer c.rejoining.Store(false)
					c.rejoin(ctx)
				}()
			}
		}
		// Capacity travels by gossip; push it when it changed.
		if n := c.meta().Running; n != gossiped && c.gossip != nil {
			gossiped = n
			c.RefreshCapacity()
		}
		if !c.rep.IsLeader() {
			// A node that leads again later starts its clocks afresh.
			clear(c.downSince)
		}
		if err := c.maybeBootstrap(); err != nil {
			c.log.Error("cluster: bootstrap", "err", err)
		}
		if c.rep.IsLeader() {
			c.reconcile(ctx)
			c.detectDead(ctx, time.Now())
			if time.Since(lastReap) > 10*time.Second {
				lastReap = time.Now()
				if err := c.rep.Reap(ctx); err != nil && ctx.Err() == nil {
					c.log.Warn("cluster: reap claims", "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		case <-tick.C:
		}
	}
}

func (c *Cluster) maybeBootstrap() error {
	if c.rep.HasState() {
		return nil
	}
	switch {
	case c.cfg.Bootstrap:
		return c.rep.Bootstrap([]raft.Server{{ID: raft.ServerID(c.cfg.NodeName), Address: raft.ServerAddress(c.cfg.Self.RaftAddr)}})
	case c.cfg.BootstrapExpect > 0:
		var servers []raft.Server
		for _, m := range c.gossip.Members() {
			if m.State != "alive" || m.Meta.Raft == "" {
				continue
			}
			if m.Meta.Expect != 0 && m.Meta.Expect != c.cfg.BootstrapExpect {
				return fmt.Errorf("member %s expects %d nodes, this node %d", m.Name, m.Meta.Expect, c.cfg.BootstrapExpect)
			}
			servers = append(servers, raft.Server{ID: raft.ServerID(m.Name), Address: raft.ServerAddress(m.Meta.Raft)})
		}
		if len(servers) < c.cfg.BootstrapExpect {
			return nil
		}
		// Every node computes the same sorted configuration from gossip, so
		// however many of them bootstrap, they agree.
		slices.SortFunc(servers, func(a, b raft.Server) int { return cmp.Compare(a.ID, b.ID) })
		c.log.Info("cluster: bootstrapping", "servers", len(servers))
		return c.rep.Bootstrap(servers)
	}
	return nil
}

// reconcile runs on the leader: alive members that are not voters become
// voters, members that left are removed, and every member's addresses are
// registered in the index.
func (c *Cluster) reconcile(ctx context.Context) {
	cf := c.rep.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return
	}
	voters := map[string]raft.Server{}
	for _, s := range cf.Configuration().Servers {
		voters[string(s.ID)] = s
	}
	registered := map[string]Node{}
	for _, n := range c.rep.fsm.Nodes() {
		registered[n.ID] = n
	}
	for _, m := range c.gossip.Members() {
		switch m.State {
		case "alive":
			if m.Meta.Raft == "" {
				continue
			}
			if s, ok := voters[m.Name]; !ok || string(s.Address) != m.Meta.Raft {
				c.log.Info("cluster: adding voter", "member", m.Name, "raft", m.Meta.Raft)
				if err := c.rep.raft.AddVoter(raft.ServerID(m.Name), raft.ServerAddress(m.Meta.Raft), 0, 10*time.Second).Error(); err != nil {
					c.log.Warn("cluster: add voter", "member", m.Name, "err", err)
					continue
				}
			}
			want := Node{ID: m.Name, APIAddr: m.Meta.API, ProxyAddr: m.Meta.Proxy, PublicHost: m.Meta.Public, RaftAddr: m.Meta.Raft, GossipAddr: m.Gossip,
				MaxSandboxes: m.Meta.Max, Draining: registered[m.Name].Draining}
			if registered[m.Name] != want {
				if err := c.rep.RegisterNode(ctx, want); err != nil {
					c.log.Warn("cluster: register node", "member", m.Name, "err", err)
				}
			}
		case "left":
			if _, ok := voters[m.Name]; ok && m.Name != c.cfg.NodeName {
				c.log.Info("cluster: removing server that left", "member", m.Name)
				if err := c.rep.raft.RemoveServer(raft.ServerID(m.Name), 0, 10*time.Second).Error(); err != nil {
					c.log.Warn("cluster: remove server", "member", m.Name, "err", err)
				}
			}
			if _, ok := registered[m.Name]; ok {
				_ = c.rep.RemoveNode(ctx, m.Name)
			}
		}
	}
}

// Replica is this node's Raft replica of the index.
func (c *Cluster) Replica() *Replica { return c.rep }

// Mux is this node's cluster port.
func (c *Cluster) Mux() *Mux { return c.mux }

// PreviewKey is the key every node of the cluster signs Daytona preview
// URLs with.
func (c *Cluster) PreviewKey() []byte { return c.cfg.Keys.Preview }

// NodeName is this node's name.
func (c *Cluster) NodeName() string { return c.cfg.NodeName }

// RefreshCapacity gossips this node's capacity after it changed.
func (c *Cluster) RefreshCapacity() {
	if err := c.gossip.Refresh(); err != nil {
		c.log.Debug("cluster: gossip capacity", "err", err)
	}
}

// MemberStatus is a member as this node sees it: what gossip knows of it,
// its Raft role and what the index says of it. The API renders it on the
// wire; the cluster keeps its own type so that it depends on no wire.
type MemberStatus struct {
	Member
	Voter  bool
	Leader bool
	// Draining: the member takes no new sandboxes (cluster drain); the
	// index's flag, which placement obeys.
	Draining bool
	// MaxSandboxes is the member's --max-sandboxes (0 = no cap).
	MaxSandboxes int
	// Placements is how many sandboxes the cluster places on the member.
	Placements int
}

// Members lists the members gossip knows, with their Raft role.
func (c *Cluster) Members() []MemberStatus {
	voters := map[string]bool{}
	if cf := c.rep.raft.GetConfiguration(); cf.Error() == nil {
		for _, s := range cf.Configuration().Servers {
			voters[string(s.ID)] = s.Suffrage == raft.Voter
		}
	}
	_, leader := c.rep.Leader()
	var out []MemberStatus
	for _, m := range c.gossip.Members() {
		ms := MemberStatus{Member: m, Voter: voters[m.Name], Leader: string(leader) == m.Name, Placements: c.rep.fsm.CountOn(m.Name)}
		if n, ok := c.rep.fsm.Node(m.Name); ok {
			ms.Draining, ms.MaxSandboxes = n.Draining, n.MaxSandboxes
		}
		out = append(out, ms)
	}
	return out
}

// NodeStatus is one node's view of the cluster: its Raft state and the
// digest and counts of its copy of the replicated index.
type NodeStatus struct {
	Node         string
	State        string // Raft state: Leader, Follower, Candidate
	Leader       string
	Term         string
	AppliedIndex uint64
	Digest       string
	Placements   int
	Names        int
	Hostnames    int
	Claims       int
	// Draining names the drained nodes.
	Draining []string
}

// Status reports this node's Raft state and the digest of its index.
func (c *Cluster) Status() NodeStatus {
	_, leader := c.rep.Leader()
	p, n, h, cl := c.rep.fsm.Counts()
	var draining []string
	for _, node := range c.rep.fsm.Nodes() {
		if node.Draining {
			draining = append(draining, node.ID)
		}
	}
	return NodeStatus{
		Draining:     draining,
		Node:         c.cfg.NodeName,
		State:        c.rep.raft.State().String(),
		Leader:       string(leader),
		Term:         c.rep.raft.Stats()["term"],
		AppliedIndex: c.rep.raft.AppliedIndex(),
		Digest:       c.rep.fsm.Digest(),
		Placements:   p, Names: n, Hostnames: h, Claims: cl,
	}
}

// PickOwner chooses the node for a new sandbox by the power of two choices:
// two alive members at random, the one with more free capacity wins. Members
// at their --max-sandboxes are never chosen; with none left it returns
// ErrNoCapacity.
func (c *Cluster) PickOwner() (Member, error) {
	cands := c.candidates()
	switch len(cands) {
	case 0:
		return Member{}, ErrNoCapacity
	case 1:
		return cands[0], nil
	}
	i := rand.IntN(len(cands))
	j := rand.IntN(len(cands) - 1)
	if j >= i {
		j++
	}
	a, b := cands[i], cands[j]
	if b.Meta.Free() > a.Meta.Free() {
		return b, nil
	}
	return a, nil
}

// candidates are the alive members with room, their running counts taken
// from the replicated index (current within milliseconds, where gossip lags
// by its interval) plus the creates this node is forwarding to them now.
func (c *Cluster) candidates() []Member {
	c.pending.Lock()
	defer c.pending.Unlock()
	var out []Member
	for _, m := range c.gossip.Members() {
		if m.State != "alive" || m.Meta.API == "" || m.Meta.Draining || !c.placeable(m.Name) {
			continue
		}
		// The registered ceiling is the one Apply enforces.
		if n, ok := c.rep.fsm.Node(m.Name); ok && n.MaxSandboxes > 0 {
			m.Meta.Max = n.MaxSandboxes
		}
		m.Meta.Running = c.rep.fsm.CountOn(m.Name) + c.pending.n[m.Name]
		if m.Meta.Free() > 0 {
			out = append(out, m)
		}
	}
	return out
}

func (c *Cluster) Inflight(node string, d int) {
	c.pending.Lock()
	defer c.pending.Unlock()
	if c.pending.n == nil {
		c.pending.n = map[string]int{}
	}
	c.pending.n[node] += d
}

// OwnerForKey picks the owner of a keyed create by rendezvous hashing of the
// key over the members: every node computes the same owner for a key while
// membership holds, so the retries of one create meet on one node, whose
// idempotency claim decides them.
func (c *Cluster) OwnerForKey(key string) (Member, error) {
	m, err := c.rendezvous(key, func(m Member) bool { return m.State != "left" })
	if err != nil {
		return m, err
	}
	// If an attempt of this key is pending on its owner, its retries go
	// there, even while that owner is down or drained: moving them while
	// that attempt may still finish there could make a second sandbox.
	holders := c.rep.fsm.PendingClaimHolders(key)
	if slices.Contains(holders, m.Name) {
		return m, nil
	}
	// An attempt pending on another live node (one the failover handed a
	// dead node's attempt to, with the sandbox it re-created) is finished
	// there.
	members := c.gossip.Members()
	for _, hm := range members {
		if slices.Contains(holders, hm.Name) && hm.State == "alive" && hm.Meta.API != "" {
			return hm, nil
		}
	}
	// An attempt pending on a node that is down but has not left may still
	// finish there when it comes back, or the failover hands it to the node
	// that re-creates its sandbox: until then its retries go to it and are
	// answered 503. A third node must not take them: it would wait on the
	// claim, and once the claim was handed over take the attempt over where
	// its sandbox can never be reserved, and record a 409 for good.
	for _, h := range holders {
		i := slices.IndexFunc(members, func(m Member) bool { return m.Name == h })
		if i < 0 {
			if _, registered := c.rep.fsm.Node(h); registered {
				return Member{Name: h, State: "dead"}, nil
			}
			continue
		}
		if members[i].State != "left" {
			return members[i], nil
		}
	}
	if m.State == "alive" && c.placeable(m.Name) {
		return m, nil
	}
	// Otherwise nothing of this key is in flight there (a completed attempt
	// replays from the replicated claim on any node), and a new key goes to
	// a live node that takes placements, chosen the same way everywhere.
	cands := map[string]bool{}
	for _, m := range c.candidates() {
		cands[m.Name] = true
	}
	return c.rendezvous(key, func(m Member) bool { return cands[m.Name] })
}

// rendezvous picks, among the members ok accepts, the one with the highest
// hash of (member, key).
func (c *Cluster) rendezvous(key string, ok func(Member) bool) (Member, error) {
	var (
		best  Member
		score uint64
		found bool
	)
	for _, m := range c.gossip.Members() {
		if !ok(m) || m.Meta.API == "" {
			continue
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte(m.Name))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(key))
		if s := h.Sum64(); !found || s > score {
			best, score, found = m, s, true
		}
	}
	if !found {
		return Member{}, ErrNoCapacity
	}
	return best, nil
}

// ErrNoCapacity: no member has room for another sandbox. It is the domain's
// sentinel, so the API maps it in its one place.
var ErrNoCapacity = sandpit.ErrNoCapacity

// Leave hands leadership on if this node leads, tells the others it leaves
// (the leader then removes it from the Raft configuration) and stops.
func (c *Cluster) Leave(ctx context.Context) error {
	if c.rep.IsLeader() {
		if err := c.rep.raft.LeadershipTransfer().Error(); err != nil {
			c.log.Warn("cluster: leadership transfer before leave", "err", err)
		}
	}
	err := c.gossip.Leave(5 * time.Second)
	// Wait until the leader has removed this node, so a restart does not
	// find itself still a voter of a cluster it left.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		cf := c.rep.raft.GetConfiguration()
		if cf.Error() != nil {
			break
		}
		still := slices.ContainsFunc(cf.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == c.cfg.NodeName })
		if !still {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(err, c.Close())
}

// Close stops the loops, Raft and gossip, without leaving: the others see
// this node fail and keep it as a voter, so it rejoins on restart.
func (c *Cluster) Close() error {
	var err error
	c.once.Do(func() {
		c.stop()
		err = errors.Join(c.gossip.Shutdown(), c.closeRaft())
		c.wg.Wait()
	})
	return err
}

func (c *Cluster) closeRaft() error {
	return errors.Join(c.rep.Shutdown(), c.mux.Close())
}

// WaitLeader waits until the cluster has a leader.
func (c *Cluster) WaitLeader(ctx context.Context) error {
	_, err := c.rep.WaitLeader(ctx)
	return err
}

// WaitCaughtUp waits until the cluster has a leader and this node has applied
// every entry the leader had committed when it asked (a read barrier through
// a no-op entry).
func (c *Cluster) WaitCaughtUp(ctx context.Context) error {
	if _, err := c.rep.WaitLeader(ctx); err != nil {
		return err
	}
	return c.rep.CatchUp(ctx)
}

// CatchUp waits until this replica has applied every entry the leader had
// committed when it asked (a read barrier through a no-op entry).
func (r *Replica) CatchUp(ctx context.Context) error {
	// An entry committed now follows everything committed before it; once
	// this node has applied it, its copy is at least that current.
	mark := newAttempt()
	if err := r.do(ctx, command{Op: opMark, Attempt: mark}); err != nil {
		return err
	}
	for r.fsm.Mark(r.cfg.NodeID) != mark {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (c *Cluster) selfNode() Node {
	n := c.cfg.Self
	n.ID = c.cfg.NodeName
	return n
}

// rejoin asks gossip to contact the registered nodes it does not see alive.
// memberlist gives up on a member it declared dead, so a node restarted
// without --join (the cluster's first node) would otherwise stay alone in
// gossip, and a node that came back would stay dead in the others' eyes;
// the index remembers where every node's gossip listens.
func (c *Cluster) rejoin(ctx context.Context) {
	alive := map[string]bool{}
	for _, m := range c.gossip.Members() {
		if m.State == "alive" || m.State == "suspect" {
			alive[m.Name] = true
		}
	}
	var addrs []string
	for _, n := range c.rep.fsm.Nodes() {
		if !alive[n.ID] && n.ID != c.cfg.NodeName && n.GossipAddr != "" {
			addrs = append(addrs, n.GossipAddr)
		}
	}
	if len(addrs) == 0 {
		return
	}
	if _, err := c.gossip.ml.Join(addrs); err != nil {
		c.log.Debug("cluster: rejoin", "addrs", addrs, "err", err)
	}
}
