package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fastRaft shortens Raft's timers so elections in tests take milliseconds.
func fastRaft(c *raft.Config) {
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
}

// inmemCluster starts n replicas over raft's in-memory transport, bootstrapped
// together, forwarding through a direct call to the leader's replica.
func inmemCluster(t *testing.T, n int) []*Replica {
	t.Helper()
	reps := make([]*Replica, n)
	trans := make([]*raft.InmemTransport, n)
	byAddr := map[raft.ServerAddress]*Replica{}
	var mu sync.Mutex
	var servers []raft.Server
	for i := range n {
		addr, tr := raft.NewInmemTransport("")
		trans[i] = tr
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i+1)), Address: addr})
	}
	for i := range n {
		for j := range n {
			if i != j {
				trans[i].Connect(servers[j].Address, trans[j])
			}
		}
	}
	forward := func(ctx context.Context, addr raft.ServerAddress, data []byte) (Result, error) {
		mu.Lock()
		r := byAddr[addr]
		mu.Unlock()
		if r == nil {
			return Result{}, errForward
		}
		return r.ApplyLocal(data)
	}
	for i := range n {
		r, err := NewReplica(ReplicaConfig{
			NodeID: string(servers[i].ID), Transport: trans[i], Forward: forward,
			Logger: quietLogger(), Tune: fastRaft,
		})
		if err != nil {
			t.Fatal(err)
		}
		reps[i] = r
		mu.Lock()
		byAddr[servers[i].Address] = r
		mu.Unlock()
		t.Cleanup(func() { _ = r.Shutdown() })
	}
	for _, r := range reps {
		if err := r.Bootstrap(servers); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := reps[0].WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return reps
}

// waitDigests waits until every replica has applied the same index.
func waitDigests(t *testing.T, reps []*Replica) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ds []string
		same := true
		for _, r := range reps {
			ds = append(ds, r.FSM().Digest())
			if ds[len(ds)-1] != ds[0] {
				same = false
			}
		}
		if same {
			return ds[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("digests never converged: %v", ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// raceNames has each replica try to reserve the same name for its own ids,
// concurrently, and checks exactly one wins.
func raceNames(t *testing.T, reps []*Replica, per int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := 0, 0
	for i, r := range reps {
		for j := range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := r.Reserve(ctx, Reservation{SandboxID: fmt.Sprintf("sb-%d-%d", i, j), Name: "contested"})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, sandpit.ErrNameConflict):
					lost++
				default:
					t.Errorf("reserve: %v", err)
				}
			}()
		}
	}
	wg.Wait()
	if won != 1 || lost != len(reps)*per-1 {
		t.Fatalf("won %d lost %d, want 1 and %d", won, lost, len(reps)*per-1)
	}
	waitDigests(t, reps)
	for _, r := range reps {
		if _, ok := r.FSM().PlacementByName("contested"); !ok {
			t.Fatal("a replica does not know the winner")
		}
	}
}

// raceClaims has every replica claim one key; exactly one acquires, the
// rest see it in flight, and after completion every replica replays it.
func raceClaims(t *testing.T, reps []*Replica, per int) {
	t.Helper()
	ctx := context.Background()
	req := sandpit.ClaimRequest{Scope: "v1", Fingerprint: "key-1", RequestHash: "h", PendingTTL: time.Minute}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acquired []sandpit.Claim
	for _, r := range reps {
		for range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := r.Claim(ctx, req)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch c.Outcome {
				case sandpit.Acquired:
					acquired = append(acquired, c)
				case sandpit.InFlight:
				default:
					t.Errorf("claim outcome %v", c.Outcome)
				}
			}()
		}
	}
	wg.Wait()
	if len(acquired) != 1 {
		t.Fatalf("%d claims acquired, want 1", len(acquired))
	}
	if err := reps[len(reps)-1].Complete(ctx, sandpit.Completion{
		Scope: "v1", Fingerprint: "key-1", Generation: acquired[0].Generation,
		TargetID: "sb", ResponseStatus: 201, ResponseBody: []byte(`{"id":"sb"}`), ReplayTTL: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		c, err := r.Claim(ctx, req)
		if err != nil || c.Outcome != sandpit.Replay || string(c.ResponseBody) != `{"id":"sb"}` {
			t.Fatalf("replay from a replica: %+v, %v", c, err)
		}
	}
}

func TestReplicaInmem(t *testing.T) {
	reps := inmemCluster(t, 3)
	raceNames(t, reps, 10)
	raceClaims(t, reps, 5)
	waitDigests(t, reps)
}

func TestReplicaSnapshotCatchUp(t *testing.T) {
	reps := inmemCluster(t, 3)
	ctx := context.Background()
	for i := range 20 {
		if err := reps[i%3].Reserve(ctx, Reservation{SandboxID: fmt.Sprintf("id%d", i), Name: fmt.Sprintf("n%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A snapshot taken through Raft restores into a fresh FSM with the
	// same digest.
	var leader *Replica
	for _, r := range reps {
		if r.IsLeader() {
			leader = r
		}
	}
	if err := leader.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	want := waitDigests(t, reps)
	snap, err := leader.FSM().Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	fresh := NewFSM()
	if err := fresh.Restore(io.NopCloser(&sink.Buffer)); err != nil {
		t.Fatal(err)
	}
	if fresh.Digest() != want {
		t.Fatal("snapshot restore gave another digest")
	}
}

// tcpNode is one replica behind a real TLS cluster port.
type tcpNode struct {
	id  string
	mux *Mux
	rep *Replica
	dir string
}

func startTCPNode(t testing.TB, id, dir string, keys Keys, addr string) *tcpNode {
	t.Helper()
	mux, err := Listen(addr, "", keys, httpguard.ConnLimits{}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: mux.RaftLayer(), MaxPool: 3, Timeout: 2 * time.Second, Logger: hclogFor(quietLogger(), "raft-net"),
	})
	rep, err := NewReplica(ReplicaConfig{
		NodeID: id, Dir: dir, Transport: trans, Forward: mux.Forwarder(), Logger: quietLogger(), Tune: fastRaft,
	})
	if err != nil {
		t.Fatal(err)
	}
	mux.SetApply(rep.ApplyLocal)
	return &tcpNode{id: id, mux: mux, rep: rep, dir: dir}
}

func (n *tcpNode) stop() {
	_ = n.rep.Shutdown()
	_ = n.mux.Close()
}

func testKeys(t *testing.T, secret string) Keys {
	t.Helper()
	k, err := DeriveKeys([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestReplicaTCP(t *testing.T) {
	keys := testKeys(t, "a cluster key of enough bytes")
	var nodes []*tcpNode
	var servers []raft.Server
	for i := range 3 {
		n := startTCPNode(t, fmt.Sprintf("n%d", i+1), t.TempDir(), keys, "127.0.0.1:0")
		nodes = append(nodes, n)
		servers = append(servers, raft.Server{ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.mux.Addr().String())})
	}
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for _, n := range nodes {
		if err := n.rep.Bootstrap(servers); err != nil {
			t.Fatal(err)
		}
	}
	reps := []*Replica{nodes[0].rep, nodes[1].rep, nodes[2].rep}
	raceNames(t, reps, 10)
	raceClaims(t, reps, 5)
	digest := waitDigests(t, reps)

	// Restart a follower from its data directory: it comes back with its
	// log and catches up without bootstrapping again.
	var f int
	for i, n := range nodes {
		if !n.rep.IsLeader() {
			f = i
			break
		}
	}
	addr := nodes[f].mux.Addr().String()
	nodes[f].stop()
	if err := nodes[(f+1)%3].rep.Reserve(context.Background(), Reservation{SandboxID: "while-down", Name: "later"}); err != nil {
		t.Fatal(err)
	}
	nodes[f] = startTCPNode(t, nodes[f].id, nodes[f].dir, keys, addr)
	if !nodes[f].rep.HasState() {
		t.Fatal("restarted node lost its raft state")
	}
	reps[f] = nodes[f].rep
	if d := waitDigests(t, reps); d == digest {
		t.Fatal("digest did not move after a write")
	}
	if _, ok := nodes[f].rep.FSM().PlacementByName("later"); !ok {
		t.Fatal("restarted follower did not catch up")
	}
}

func TestWrongKeyCannotSpeakRaft(t *testing.T) {
	good := testKeys(t, "a cluster key of enough bytes")
	bad := testKeys(t, "another key, also long enough")
	n := startTCPNode(t, "n1", t.TempDir(), good, "127.0.0.1:0")
	defer n.stop()
	if err := n.rep.Bootstrap([]raft.Server{{ID: "n1", Address: raft.ServerAddress(n.mux.Addr().String())}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := n.rep.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}

	intruder, err := Listen("127.0.0.1:0", "", bad, httpguard.ConnLimits{}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	// Neither a Raft channel nor a forwarded entry gets through the
	// handshake, and nothing reaches the index.
	if c, err := intruder.RaftLayer().Dial(raft.ServerAddress(n.mux.Addr().String()), time.Second); err == nil {
		// TLS 1.3 clients finish before the server checks them; the server
		// then closes, so a read must fail.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var b [1]byte
		if _, rerr := c.Read(b[:]); rerr == nil {
			t.Fatal("a node with the wrong key opened a raft channel")
		}
		c.Close()
	}
	fwd := intruder.Forwarder()
	b := []byte(`{"op":"reserve","sandbox_id":"evil","name":"evil"}`)
	if _, err := fwd(ctx, raft.ServerAddress(n.mux.Addr().String()), b); err == nil {
		t.Fatal("a node with the wrong key forwarded an entry")
	}
	if _, ok := n.rep.FSM().PlacementByName("evil"); ok {
		t.Fatal("the intruder's entry reached the index")
	}
	// A plain TCP client gets nothing either.
	c, err := net.Dial("tcp", n.mux.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("R\x00\x00\x00"))
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var buf [64]byte
	if k, err := c.Read(buf[:]); err == nil && k > 0 && buf[0] != 0x15 { // 0x15 = TLS alert
		t.Fatalf("plain TCP got %q", buf[:k])
	}
	c.Close()
}

// TestClusterPortCapsConnections: the cluster port takes anyone's TCP before
// the handshake tells a node from a stranger, so a flood from one source is
// held to its share (the rest closed as they arrive) and a node from another
// source still opens its Raft channel.
func TestClusterPortCapsConnections(t *testing.T) {
	keys := testKeys(t, "a cluster key of enough bytes")
	m, err := Listen("127.0.0.1:0", "", keys, httpguard.ConnLimits{Total: 8, PerSource: 3}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	lim := m.ln.(*httpguard.LimitedListener)
	flood := netip.MustParseAddr("127.0.0.2")
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(flood.AsSlice())}}
	for range 10 {
		// A connection the port refuses may be reset before the dial
		// returns; the listener's counts below are what the test reads.
		if c, err := d.Dial("tcp", m.Addr().String()); err == nil {
			defer c.Close()
		}
	}
	deadline := time.Now().Add(8 * time.Second)
	for {
		_, fromFlood := lim.Open(flood)
		if fromFlood == 3 && lim.Refused() == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flooding source holds %d connections, %d refused; want 3 and 7", fromFlood, lim.Refused())
		}
		time.Sleep(20 * time.Millisecond)
	}

	peer, err := Listen("127.0.0.1:0", "", keys, httpguard.ConnLimits{}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := peer.RaftLayer().Dial(raft.ServerAddress(m.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("a node could not dial the flooded port: %v", err)
	}
	defer c.Close()
	accepted := make(chan error, 1)
	go func() {
		sc, err := m.RaftLayer().Accept()
		if err == nil {
			sc.Close()
		}
		accepted <- err
	}()
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the node's Raft channel was not accepted beside the flood")
	}
}
