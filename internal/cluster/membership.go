package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// Meta is what a node tells the others by gossip: where to reach it and how
// much room it has. It changes without a log entry, so capacity can follow
// every create and delete without loading Raft.
type Meta struct {
	API      string `json:"api"`
	Raft     string `json:"raft"`
	Proxy    string `json:"proxy,omitempty"`
	Public   string `json:"public,omitempty"`
	Running  int    `json:"running"`
	Max      int    `json:"max,omitempty"`    // 0 = no limit
	Expect   int    `json:"expect,omitempty"` // --bootstrap-expect of this node
	Draining bool   `json:"draining,omitempty"`
	// Leaving is gossiped just before a graceful leave, so the others can
	// tell a member that left (and is removed from Raft) from one that died
	// (and is expected back): memberlist reports both alike.
	Leaving bool `json:"leaving,omitempty"`
}

// Free is the node's free capacity for placement; a node without a limit
// counts as having a large fixed room less what it runs, so placement still
// prefers the emptier one.
func (m Meta) Free() int {
	if m.Max > 0 {
		return m.Max - m.Running
	}
	return 1<<20 - m.Running
}

// Member is one node as gossip sees it.
type Member struct {
	Name   string `json:"name"`
	Gossip string `json:"gossip"`
	State  string `json:"state"`
	Meta   Meta   `json:"meta"`
}

// MembershipConfig configures gossip.
type MembershipConfig struct {
	NodeName  string
	Bind      string // host:port of the gossip listener (TCP and UDP)
	Advertise string // host:port others reach it at; default Bind
	Keys      Keys
	Meta      func() Meta
	// OnChange is called after a member joins, leaves or updates.
	OnChange func()
	// OnDown and OnUp are called with the name of a member declared dead
	// or gone, and of one seen alive (again), from gossip's own goroutine:
	// they must not block.
	OnDown func(name string)
	OnUp   func(name string)
	Logger *slog.Logger
	// Fast shortens the failure detector's timers (tests).
	Fast bool
	// ConnLimits bound the TCP connections the gossip port holds (see
	// cappedTransport); zero means none.
	ConnLimits httpguard.ConnLimits
}

// Membership is this node's view of the cluster's members, kept by
// memberlist with every message encrypted and authenticated by the keyring.
type Membership struct {
	ml  *memberlist.Memberlist
	tr  *cappedTransport
	cfg MembershipConfig
	mu  sync.Mutex
	// alive holds the live members as of the last event about each; gone
	// the last view of members that died or left. Both are copies made in
	// memberlist's event callbacks, which it calls with its node lock held:
	// the *Node values it hands out are written later under that lock, so
	// reading them anywhere else races.
	alive   map[string]Member
	gone    map[string]Member
	leaving bool
	spread  time.Duration // how long a gossiped update takes to reach all
	upd     sync.Mutex
}

func toMember(n *memberlist.Node) Member {
	var meta Meta
	_ = json.Unmarshal(n.Meta, &meta)
	return Member{
		Name:   n.Name,
		Gossip: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		State:  stateName(n.State),
		Meta:   meta,
	}
}

// StartMembership starts gossip on cfg.Bind.
func StartMembership(cfg MembershipConfig) (*Membership, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	host, port, err := splitHostPort(cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("--gossip-listen: %w", err)
	}
	mc := memberlist.DefaultLANConfig()
	if cfg.Fast {
		mc = memberlist.DefaultLocalConfig()
		mc.ProbeInterval = 200 * time.Millisecond
		mc.GossipInterval = 50 * time.Millisecond
	}
	mc.Name = cfg.NodeName
	mc.BindAddr, mc.BindPort = host, port
	if cfg.Advertise != "" {
		ah, ap, err := splitHostPort(cfg.Advertise)
		if err != nil {
			return nil, fmt.Errorf("gossip advertise: %w", err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = ah, ap
	}
	kr, err := memberlist.NewKeyring(nil, cfg.Keys.Gossip)
	if err != nil {
		return nil, fmt.Errorf("gossip keyring: %w", err)
	}
	mc.Keyring = kr
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.Logger = slog.NewLogLogger(cfg.Logger.With("component", "gossip").Handler(), slog.LevelDebug)
	tr, err := newCappedTransport(host, port, cfg.ConnLimits, mc.Logger, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("--gossip-listen %s: %w", cfg.Bind, err)
	}
	mc.Transport = tr
	if port == 0 {
		mc.BindPort = tr.GetAutoBindPort()
	}
	m := &Membership{cfg: cfg, alive: map[string]Member{}, gone: map[string]Member{}, spread: 10 * mc.GossipInterval}
	mc.Delegate = delegate{m}
	mc.Events = events{m}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		return nil, fmt.Errorf("start gossip: %w", err)
	}
	m.ml, m.tr = ml, tr
	return m, nil
}

func splitHostPort(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port of %q: %w", s, err)
	}
	return h, port, nil
}

// Join contacts the given gossip addresses, retrying until one answers or
// ctx ends. A node that is the first of its cluster has none to join.
func (m *Membership) Join(ctx context.Context, addrs []string) error {
	if len(addrs) == 0 {
		return nil
	}
	backoff := 200 * time.Millisecond
	for {
		n, err := m.ml.Join(addrs)
		if n > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("no member answered")
		}
		m.cfg.Logger.Warn("cluster: join failed, retrying", "addrs", addrs, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("join %v: %w", addrs, err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// Members returns every member gossip has told of, with its state as of the
// last event about it (alive, suspect, dead or left), sorted by name.
// memberlist itself lists only the live ones; the leader needs the ones that
// left too, to remove them from Raft.
func (m *Membership) Members() []Member {
	var out []Member
	m.mu.Lock()
	for _, mem := range m.alive {
		out = append(out, mem)
	}
	for name, mem := range m.gone {
		if _, ok := m.alive[name]; !ok {
			out = append(out, mem)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func stateName(s memberlist.NodeStateType) string {
	switch s {
	case memberlist.StateAlive:
		return "alive"
	case memberlist.StateSuspect:
		return "suspect"
	case memberlist.StateDead:
		return "dead"
	case memberlist.StateLeft:
		return "left"
	}
	return "unknown"
}

// Refresh gossips this node's current Meta (after its capacity changed).
func (m *Membership) Refresh() error {
	m.upd.Lock()
	defer m.upd.Unlock()
	return m.ml.UpdateNode(time.Second)
}

// Leave tells the others this node leaves, then stops gossip.
func (m *Membership) Leave(timeout time.Duration) error {
	m.mu.Lock()
	m.leaving = true
	m.mu.Unlock()
	// Announce the intent first, then wait a moment for it to spread by
	// gossip before the leave itself.
	_ = m.Refresh()
	time.Sleep(m.spread)
	err := m.ml.Leave(timeout)
	return errors.Join(err, m.ml.Shutdown())
}

// Shutdown stops gossip without telling the others (they detect it).
func (m *Membership) Shutdown() error { return m.ml.Shutdown() }

type delegate struct{ m *Membership }

func (d delegate) NodeMeta(limit int) []byte {
	if d.m.cfg.Meta == nil {
		return nil
	}
	meta := d.m.cfg.Meta()
	d.m.mu.Lock()
	meta.Leaving = d.m.leaving
	d.m.mu.Unlock()
	b, _ := json.Marshal(meta)
	if len(b) > limit {
		// The addresses matter more than the numbers; drop those.
		meta.Running, meta.Max = 0, 0
		b, _ = json.Marshal(meta)
	}
	return b
}

func (delegate) NotifyMsg([]byte)                {}
func (delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (delegate) LocalState(bool) []byte          { return nil }
func (delegate) MergeRemoteState([]byte, bool)   {}
func (e events) NotifyJoin(n *memberlist.Node) {
	mem := toMember(n)
	e.m.mu.Lock()
	delete(e.m.gone, n.Name)
	e.m.alive[n.Name] = mem
	e.m.mu.Unlock()
	if e.m.cfg.OnUp != nil {
		e.m.cfg.OnUp(n.Name)
	}
	e.changed()
}

func (e events) NotifyLeave(n *memberlist.Node) {
	mem := toMember(n)
	mem.State = "dead"
	if mem.Meta.Leaving {
		mem.State = "left"
	}
	e.m.mu.Lock()
	delete(e.m.alive, n.Name)
	e.m.gone[n.Name] = mem
	e.m.mu.Unlock()
	if e.m.cfg.OnDown != nil {
		e.m.cfg.OnDown(n.Name)
	}
	e.changed()
}

func (e events) NotifyUpdate(n *memberlist.Node) {
	mem := toMember(n)
	e.m.mu.Lock()
	if _, ok := e.m.alive[n.Name]; ok {
		e.m.alive[n.Name] = mem
	}
	e.m.mu.Unlock()
	e.changed()
}
func (e events) changed() {
	if e.m.cfg.OnChange != nil {
		e.m.cfg.OnChange()
	}
}

type events struct{ m *Membership }
