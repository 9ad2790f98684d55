package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/sandpit-dev/sandpit"
)

// Forwarder sends an encoded command to the leader and returns what applying
// it there returned. The network layer provides it; a replica without one
// answers ErrNotLeader on followers.
type Forwarder func(ctx context.Context, leader raft.ServerAddress, cmd []byte) (Result, error)

// ReplicaConfig configures one node's Raft replica.
type ReplicaConfig struct {
	NodeID string
	// Dir holds raft.db (log and stable store) and the snapshots. Empty keeps
	// everything in memory, for tests.
	Dir       string
	Transport raft.Transport
	Forward   Forwarder
	Logger    *slog.Logger
	// Tune, when set, adjusts the Raft configuration (tests shorten timeouts).
	Tune func(*raft.Config)
	// ApplyTimeout bounds one proposal, including waiting for a leader
	// during an election; default 5 s.
	ApplyTimeout time.Duration
	Now          func() time.Time
}

// Replica is one node's member of the Raft group over the cluster index.
type Replica struct {
	cfg    ReplicaConfig
	raft   *raft.Raft
	fsm    *FSM
	closer func() error
}

// NewReplica opens the stores and starts Raft. It does not bootstrap.
func NewReplica(cfg ReplicaConfig) (*Replica, error) {
	if cfg.NodeID == "" || cfg.Transport == nil {
		return nil, errors.New("cluster replica: node id and transport are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hclogFor(cfg.Logger, "raft")
	// The index is small and a snapshot is cheap; snapshot often enough
	// that a restarted or lagging node catches up from a snapshot rather
	// than replaying a long log.
	rc.SnapshotThreshold = 4096
	rc.TrailingLogs = 4096
	if cfg.Tune != nil {
		cfg.Tune(rc)
	}

	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
		closer = func() error { return nil }
	)
	if cfg.Dir == "" {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("cluster replica: %w", err)
		}
		bolt, err := raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, "raft.db"))
		if err != nil {
			return nil, fmt.Errorf("cluster replica: open raft.db: %w", err)
		}
		fss, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hclogFor(cfg.Logger, "raft-snapshot"))
		if err != nil {
			bolt.Close()
			return nil, fmt.Errorf("cluster replica: snapshots: %w", err)
		}
		cache, err := raft.NewLogCache(512, bolt)
		if err != nil {
			bolt.Close()
			return nil, err
		}
		logs, stable, snaps, closer = cache, bolt, fss, bolt.Close
	}
	fsm := NewFSM()
	r, err := raft.NewRaft(rc, fsm, logs, stable, snaps, cfg.Transport)
	if err != nil {
		_ = closer()
		return nil, fmt.Errorf("cluster replica: start raft: %w", err)
	}
	return &Replica{cfg: cfg, raft: r, fsm: fsm, closer: closer}, nil
}

// HasState reports whether this replica has a log or snapshot already (a
// restart), in which case it must not bootstrap again.
func (r *Replica) HasState() bool {
	return r.raft.LastIndex() > 0
}

// Bootstrap makes the initial configuration. Every node of a
// --bootstrap-expect group calls it with the same servers; Raft accepts the
// identical configuration on each, and a node that already has state refuses
// it harmlessly.
func (r *Replica) Bootstrap(servers []raft.Server) error {
	err := r.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	return err
}

// FSM returns the replicated index, for reads. Reads on a follower may lag
// the leader by the entries it has not applied yet.
func (r *Replica) FSM() *FSM { return r.fsm }

// Raft exposes the underlying Raft node for membership changes and stats.
func (r *Replica) Raft() *raft.Raft { return r.raft }

// IsLeader reports whether this node is the leader now.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// Leader returns the current leader's address and id, empty during an
// election.
func (r *Replica) Leader() (raft.ServerAddress, raft.ServerID) { return r.raft.LeaderWithID() }

// Shutdown stops Raft and closes the stores.
func (r *Replica) Shutdown() error {
	err := r.raft.Shutdown().Error()
	return errors.Join(err, r.closer())
}

// WaitLeader waits until some node is leader (returns its id) or ctx ends.
func (r *Replica) WaitLeader(ctx context.Context) (raft.ServerID, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, id := r.raft.LeaderWithID(); id != "" {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for leader: %w", sandpit.ErrNoLeader)
		case <-t.C:
		}
	}
}

// ApplyLocal applies an encoded command on this node, which must be the
// leader; the forwarding server calls it for commands from followers.
func (r *Replica) ApplyLocal(data []byte) (Result, error) {
	f := r.raft.Apply(data, r.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return Result{}, err
	}
	res, ok := f.Response().(Result)
	if !ok {
		return Result{}, fmt.Errorf("cluster apply: unexpected response %T", f.Response())
	}
	return res, nil
}

// propose commits c through the leader, forwarding when this node is a
// follower, and retries through an election until ApplyTimeout. Every
// command is safe to propose twice (see the attempt ids and the id-keyed
// reservations), because an entry whose leader lost its leadership may have
// committed all the same.
func (r *Replica) propose(ctx context.Context, c command) (Result, error) {
	if c.At.IsZero() {
		c.At = r.cfg.Now().UTC()
	}
	if c.Node == "" {
		c.Node = r.cfg.NodeID
	}
	data, err := json.Marshal(c)
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ApplyTimeout)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		var (
			res Result
			err error
		)
		addr, id := r.raft.LeaderWithID()
		switch {
		case id == "":
			err = sandpit.ErrNoLeader
		case string(id) == r.cfg.NodeID:
			res, err = r.ApplyLocal(data)
		case r.cfg.Forward == nil:
			err = raft.ErrNotLeader
		default:
			res, err = r.cfg.Forward(ctx, addr, data)
		}
		if err == nil {
			return res, nil
		}
		if !retryable(err) {
			return Result{}, err
		}
		select {
		case <-ctx.Done():
			if errors.Is(err, sandpit.ErrNoLeader) {
				return Result{}, err
			}
			return Result{}, fmt.Errorf("%w: %v", sandpit.ErrNoLeader, err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// retryable tells the errors of an election or a lost connection to the
// leader, which another try after the election answers, from real ones.
func retryable(err error) bool {
	switch {
	case errors.Is(err, sandpit.ErrNoLeader),
		errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, errForward):
		return true
	}
	return false
}

// errForward marks a failure to reach the leader over the network.
var errForward = errors.New("forward to leader failed")

func (r *Replica) do(ctx context.Context, c command) error {
	res, err := r.propose(ctx, c)
	if err != nil {
		return err
	}
	return res.Err
}

// RegisterNode records a node's addresses in the index.
func (r *Replica) RegisterNode(ctx context.Context, n Node) error {
	return r.do(ctx, command{Op: opRegisterNode, NodeInfo: &n})
}

// RemoveNode forgets a node's addresses.
func (r *Replica) RemoveNode(ctx context.Context, id string) error {
	return r.do(ctx, command{Op: opRemoveNode, Node: id})
}

// Reservation is what Reserve records before a sandbox has an owner node.
type Reservation struct {
	SandboxID string
	Name      string // "" = unnamed
	Owner     string
	Labels    map[string]string
	// Image is what the sandbox runs, kept so that a listing can show a
	// sandbox lost with its node.
	Image string
	// Node, when set, places the sandbox on that node in the same entry.
	Node string
}

// Reserve records a new sandbox id and takes its name cluster-wide. It
// returns sandpit.ErrNameConflict when another sandbox holds the name.
func (r *Replica) Reserve(ctx context.Context, res Reservation) error {
	return r.do(ctx, command{Op: opReserve, SandboxID: res.SandboxID, Name: res.Name, Owner: res.Owner, Labels: res.Labels, Image: res.Image, Node: res.Node, Place: res.Node != ""})
}

// Place names the node that owns (creates and runs) a reserved sandbox.
func (r *Replica) Place(ctx context.Context, sandboxID, node string) error {
	return r.do(ctx, command{Op: opPlace, SandboxID: sandboxID, Node: node})
}

// Delete removes a sandbox's placement and frees its name and hostnames. It
// also cancels a reservation that was never placed.
func (r *Replica) Delete(ctx context.Context, sandboxID string) error {
	return r.do(ctx, command{Op: opDelete, SandboxID: sandboxID})
}

// AddHostname binds a custom hostname to a sandbox cluster-wide; it returns
// sandpit.ErrHostnameConflict when another sandbox holds it.
func (r *Replica) AddHostname(ctx context.Context, sandboxID, host string) error {
	return r.do(ctx, command{Op: opAddHostname, SandboxID: sandboxID, Hostname: host})
}

// RemoveHostname unbinds a custom hostname if it is bound to sandboxID.
func (r *Replica) RemoveHostname(ctx context.Context, sandboxID, host string) error {
	return r.do(ctx, command{Op: opRemoveHostname, SandboxID: sandboxID, Hostname: host})
}

// Claim decides cluster-wide whether this caller runs the request named by
// (req.Scope, req.Fingerprint), with the same outcomes as the SQLite store's
// ClaimIdempotentRequest.
func (r *Replica) Claim(ctx context.Context, req sandpit.ClaimRequest) (sandpit.Claim, error) {
	res, err := r.propose(ctx, command{Op: opClaim, Claim: &req, Attempt: newAttempt()})
	if err != nil {
		return sandpit.Claim{}, err
	}
	return res.Claim, res.Err
}

// SetTarget records the resource id the holder of a pending claim chose.
func (r *Replica) SetTarget(ctx context.Context, scope, fingerprint string, generation int64, target string) error {
	return r.do(ctx, command{Op: opSetTarget, Scope: scope, Fingerprint: fingerprint, Generation: generation, SandboxID: target})
}

// Complete turns a pending claim ready with its stored response.
func (r *Replica) Complete(ctx context.Context, c sandpit.Completion) error {
	return r.do(ctx, command{Op: opComplete, Completion: &c, Attempt: newAttempt()})
}

// Abandon removes a pending claim at generation so the next attempt starts
// afresh; the work it guarded failed and was undone.
func (r *Replica) Abandon(ctx context.Context, scope, fingerprint string, generation int64) error {
	return r.do(ctx, command{Op: opAbandon, Scope: scope, Fingerprint: fingerprint, Generation: generation})
}

// Reap deletes the claims past both their lock and their replay window as of
// the proposer's now. The leader runs it periodically.
func (r *Replica) Reap(ctx context.Context) error {
	return r.do(ctx, command{Op: opReap})
}

// newAttempt names one proposal so that the same entry, committed twice
// because its first leader lost leadership before answering, is recognised.
func newAttempt() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// hclogFor adapts slog to the hclog interface raft and its stores use; raft
// is chatty at info, so only its warnings and errors come through.
func hclogFor(l *slog.Logger, name string) hclog.Logger {
	return hclog.FromStandardLogger(slog.NewLogLogger(l.Handler(), slog.LevelWarn), &hclog.LoggerOptions{
		Name:  name,
		Level: hclog.Warn,
	})
}

// ExpireNodeClaims ends, as of since (the node's start), the locks of the
// pending claims node held, and keeps each for at least keep, so the retries
// of its interrupted attempts take them over at once (same generation, same
// target) instead of waiting out the locks.
func (r *Replica) ExpireNodeClaims(ctx context.Context, node string, since time.Time, keep time.Duration) error {
	return r.do(ctx, command{Op: opExpireNode, Node: node, At: since.UTC(), Keep: keep})
}
