// Package cluster_test runs three real daemons on loopback as one cluster,
// each with its own data directory and ports, sharing the Docker engine, and
// checks what must hold cluster-wide.
package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

var sandpitBin string

func TestMain(m *testing.M) { os.Exit(harness.RunWithBinary(m, &sandpitBin)) }

// node is one daemon of the test cluster.
type node struct {
	*harness.Daemon
	name   string
	gossip string
	raft   string
}

// testCluster is three daemons formed with --bootstrap-expect 3.
type testCluster struct {
	t     testing.TB
	nodes []*node
	key   string
}

func writeKey(t testing.TB, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func clusterArgs(name, gossip, raft, keyFile string, expect int, join []string) []string {
	args := []string{"--cluster", "--node-name", name, "--gossip-listen", gossip, "--raft-listen", raft,
		"--cluster-key-file", keyFile}
	if expect > 0 {
		args = append(args, "--bootstrap-expect", strconv.Itoa(expect))
	}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	return args
}

func loopback(t testing.TB) string { return "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t)) }

// startNode starts one clustered daemon.
// The nodes of a test cluster share one admin token, as an operator's would,
// so that one E2B key or client works against every node.
const clusterToken = "test-cluster-admin-token"

func startNode(t testing.TB, name, keyFile string, expect int, join []string, extra ...string) *node {
	t.Helper()
	var gossip, raft string
	d := harness.Start(t, sandpitBin, harness.Options{
		Args: extra,
		// Chosen again for each start attempt, should one find a port
		// taken.
		PortArgs: func() []string {
			gossip, raft = loopback(t), loopback(t)
			return clusterArgs(name, gossip, raft, keyFile, expect, join)
		},
		Env:   []string{"SANDPIT_TEST_CLUSTER_FAST=1"},
		Token: clusterToken,
	})
	return &node{Daemon: d, name: name, gossip: gossip, raft: raft}
}

// startCluster starts three nodes and waits until they form one cluster with
// a leader and three voters.
func startCluster(t testing.TB) *testCluster { return startClusterWith(t, nil) }

// startClusterWith is startCluster with extra serve flags for each node,
// chosen by its name (n1, n2, n3); extra may be nil.
func startClusterWith(t testing.TB, extra func(name string) []string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, key: writeKey(t, "the test cluster's shared secret")}
	flags := func(name string) []string {
		if extra == nil {
			return nil
		}
		return extra(name)
	}
	first := startNode(t, "n1", c.key, 3, nil, flags("n1")...)
	c.nodes = []*node{first,
		startNode(t, "n2", c.key, 3, []string{first.gossip}, flags("n2")...),
		startNode(t, "n3", c.key, 3, []string{first.gossip}, flags("n3")...)}
	c.waitFormed(30 * time.Second)
	return c
}

func (c *testCluster) waitFormed(d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok := true
		for _, n := range c.nodes {
			ms, err := n.Client().ClusterMembers(context.Background())
			voters, leaders := 0, 0
			for _, m := range ms {
				if m.Voter && m.State == "alive" {
					voters++
				}
				if m.Leader {
					leaders++
				}
			}
			if err != nil || voters != len(c.nodes) || leaders != 1 {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, n := range c.nodes {
				ms, err := n.Client().ClusterMembers(context.Background())
				c.t.Logf("%s: %+v %v", n.name, ms, err)
			}
			c.t.Fatal("the cluster did not form")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// digests waits until every node reports the same digest and returns it.
func (c *testCluster) digests(d time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		var ds []string
		for _, n := range c.nodes {
			st, err := n.Client().ClusterStatus(context.Background())
			if err != nil {
				ds = append(ds, "error: "+err.Error())
				continue
			}
			ds = append(ds, st.Digest)
		}
		same := true
		for _, x := range ds {
			if x != ds[0] || strings.HasPrefix(x, "error") {
				same = false
			}
		}
		if same {
			return ds[0]
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("digests differ: %v", ds)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// call sends one request without retries, so every answer is counted as the
// server gave it.
func call(ctx context.Context, n *node, method, path, body string, header map[string]string) harness.Answer {
	req, err := http.NewRequestWithContext(ctx, method, n.URL()+path, strings.NewReader(body))
	if err != nil {
		return harness.Answer{Err: err}
	}
	req.Header.Set("Authorization", "Bearer "+n.Token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return harness.Answer{Err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return harness.Answer{Status: resp.StatusCode, Body: b, Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}

// storm sends n requests spread round-robin over the nodes, all at once.
func storm(c *testCluster, n int, send func(i int, nd *node) harness.Answer) []harness.Answer {
	out := make([]harness.Answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = send(i, c.nodes[i%len(c.nodes)])
		}()
	}
	close(start)
	wg.Wait()
	return out
}

func tally(as []harness.Answer) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		switch {
		case a.Err != nil:
			m["error: "+a.Err.Error()]++
		case a.Status >= 400:
			m[fmt.Sprintf("%d %s", a.Status, a.Code())]++
		default:
			m[strconv.Itoa(a.Status)]++
		}
	}
	return m
}

func TestClusterNameIsUniqueAcrossNodes(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	as := storm(c, 30, func(i int, nd *node) harness.Answer {
		return call(ctx, nd, http.MethodPost, "/v1/sandboxes", `{"name":"contested"}`, nil)
	})
	got := tally(as)
	t.Logf("answers: %v", got)
	if got["201"] != 1 || got["409 name_conflict"] != 29 {
		t.Fatalf("answers %v, want one 201 and 29 409 name_conflict", got)
	}
	var winner harness.Answer
	for _, a := range as {
		if a.Status == 201 {
			winner = a
		}
	}
	// Exactly one container exists across the three daemons.
	total := 0
	for _, n := range c.nodes {
		total += len(n.Containers(t))
	}
	if total != 1 {
		t.Fatalf("%d containers across the cluster, want 1", total)
	}
	c.digests(10 * time.Second)

	// Daytona finds it by name through every node.
	for _, n := range c.nodes {
		a := call(ctx, n, http.MethodGet, "/daytona/sandbox/contested", "", nil)
		if a.Status != 200 || a.ID() != winner.ID() {
			t.Fatalf("daytona get by name through %s: %d %s, want %s", n.name, a.Status, a.Body, winner.ID())
		}
	}

	// The same holds for a custom hostname bound to sandboxes on different
	// nodes: make one sandbox on each node, then race the binds.
	var ids []string
	for i, n := range c.nodes {
		sb, err := n.Client().Create(ctx, client.CreateRequest{Name: fmt.Sprintf("host-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		// A domain targets an exposed port.
		if _, err := n.Client().ExposePort(ctx, sb.ID, 8080, "http"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	binds := storm(c, 30, func(i int, nd *node) harness.Answer {
		id := ids[i%len(c.nodes)]
		return call(ctx, nd, http.MethodPost, "/v1/sandboxes/"+id+"/custom-domains", `{"hostname":"app.contested.test","port":8080}`, nil)
	})
	got = tally(binds)
	t.Logf("binds: %v", got)
	okBinds := 0
	for k, v := range got {
		if k == "200" || k == "201" {
			okBinds += v
		}
	}
	// The winner's node may see a few of its own retries succeed
	// idempotently (same sandbox, same hostname); every other bind loses.
	if okBinds != 10 || got["409 hostname_conflict"] != 20 {
		t.Fatalf("binds %v, want 10 successes for one sandbox and 20 409 hostname_conflict", got)
	}

	// Deleting the named sandbox frees the name cluster-wide.
	owner := c.nodes[0]
	for _, n := range c.nodes {
		if len(n.Containers(t, "sandpit.sandbox-id="+winner.ID())) > 0 {
			owner = n
		}
	}
	if err := owner.Client().Delete(ctx, winner.ID()); err != nil {
		t.Fatal(err)
	}
	other := c.nodes[0]
	if other == owner {
		other = c.nodes[1]
	}
	if a := call(ctx, other, http.MethodPost, "/v1/sandboxes", `{"name":"contested"}`, nil); a.Status != 201 {
		t.Fatalf("create of a freed name on another node: %d %s", a.Status, a.Body)
	}
	c.digests(10 * time.Second)
}

func TestClusterRefusesWrongKey(t *testing.T) {
	c := startCluster(t)
	bad := writeKey(t, "not the cluster's secret at all")
	intruder := startNode(t, "intruder", bad, 0, []string{c.nodes[0].gossip})
	// Give gossip time to try (the joiner retries in the background).
	time.Sleep(3 * time.Second)
	for _, n := range c.nodes {
		ms, err := n.Client().ClusterMembers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Name == "intruder" {
				t.Fatalf("%s lists the node with the wrong key", n.name)
			}
		}
	}
	if !strings.Contains(intruder.Logs(), "join failed") {
		t.Fatalf("the intruder does not report a failed join:\n%s", intruder.Logs())
	}
}

// ownerOf finds the node whose daemon runs the sandbox's container.
func (c *testCluster) ownerOf(t *testing.T, id string) *node {
	t.Helper()
	for _, n := range c.nodes {
		if len(n.Containers(t, "sandpit.sandbox-id="+id)) > 0 {
			return n
		}
	}
	return nil
}

func TestClusterUnnamedCreatesSpreadAndEveryNodeServesEverySandbox(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Thirty creates without a key through node 1, a few at a time.
	entry := c.nodes[0]
	var ids []string
	var mu sync.Mutex
	sem := make(chan struct{}, 6)
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			a := call(ctx, entry, http.MethodPost, "/v1/sandboxes", `{}`, nil)
			if a.Status != 201 {
				t.Errorf("create: %d %s %v", a.Status, a.Body, a.Err)
				return
			}
			mu.Lock()
			ids = append(ids, a.ID())
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	per := map[string]int{}
	for _, n := range c.nodes {
		per[n.name] = len(n.Containers(t))
	}
	t.Logf("containers per node: %v", per)
	for name, k := range per {
		if k < 5 {
			t.Errorf("node %s owns %d of 30 sandboxes, want at least 5", name, k)
		}
	}
	// Every node lists the whole cluster, and pages through it.
	for _, n := range c.nodes {
		all, err := listAll(ctx, n)
		if err != nil || len(all) != 30 {
			t.Fatalf("list through %s: %d sandboxes, %v", n.name, len(all), err)
		}
	}
	seen := map[string]bool{}
	token := ""
	var last time.Time
	for pages := 0; ; pages++ {
		page, next, err := c.nodes[2].Client().List(ctx, client.ListOptions{Limit: 7, PageToken: token})
		if err != nil || pages > 10 {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, sb := range page {
			if seen[sb.ID] || sb.CreatedAt.Before(last) {
				t.Fatalf("page %d repeats or reorders %s", pages, sb.ID)
			}
			seen[sb.ID], last = true, sb.CreatedAt
		}
		if next == "" {
			break
		}
		token = next
	}
	if len(seen) != 30 {
		t.Fatalf("paging saw %d of 30 sandboxes", len(seen))
	}

	// Any node answers for any sandbox: get, exec and delete reach the
	// owner.
	id := ids[0]
	owner := c.ownerOf(t, id)
	for _, n := range c.nodes {
		sb, err := n.Client().Get(ctx, id)
		if err != nil || sb.ID != id {
			t.Fatalf("get %s through %s (owner %s): %+v %v", id, n.name, owner.name, sb, err)
		}
		res, err := n.Client().Exec(ctx, id, client.ExecRequest{Cmd: "echo", Args: []string{"hi from " + n.name}})
		if err != nil || strings.TrimSpace(res.Stdout) != "hi from "+n.name {
			t.Fatalf("exec through %s: %+v %v", n.name, res, err)
		}
	}
	var other *node
	for _, n := range c.nodes {
		if n != owner {
			other = n
		}
	}
	if err := other.Client().Delete(ctx, id); err != nil {
		t.Fatalf("delete through a non-owner: %v", err)
	}
	if len(owner.Containers(t, "sandpit.sandbox-id="+id)) != 0 {
		t.Fatal("the owner still has the container")
	}
	if a := call(ctx, c.nodes[2], http.MethodGet, "/v1/sandboxes/"+id, "", nil); a.Status != 404 {
		t.Fatalf("get after delete: %d %s", a.Status, a.Body)
	}
	c.digests(10 * time.Second)
}

func TestClusterIdempotencyKeyAcrossNodes(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key := map[string]string{"Idempotency-Key": "cluster-key-1"}
	as := storm(c, 30, func(i int, nd *node) harness.Answer {
		// A duplicate that finds the first attempt in flight waits for it
		// (up to --idempotency-wait), so every answer is the result.
		return call(ctx, nd, http.MethodPost, "/v1/sandboxes", `{"labels":{"k":"v"}}`, key)
	})
	t.Logf("answers: %v", tally(as))
	ids := map[string]bool{}
	var first []byte
	for _, a := range as {
		if a.Status != 201 {
			t.Fatalf("answer %d %s %v", a.Status, a.Body, a.Err)
		}
		ids[a.ID()] = true
		if first == nil {
			first = a.Body
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%d sandboxes for one key: %v", len(ids), ids)
	}
	total := 0
	for _, n := range c.nodes {
		total += len(n.Containers(t))
	}
	if total != 1 {
		t.Fatalf("%d containers for one key", total)
	}
	// Replays from every node are byte-identical and say so.
	for _, n := range c.nodes {
		a := call(ctx, n, http.MethodPost, "/v1/sandboxes", `{"labels":{"k":"v"}}`, key)
		if a.Status != 201 || !a.Replayed || string(a.Body) != string(as[0].Body) {
			t.Fatalf("replay from %s: %d replayed=%v %s, want %s", n.name, a.Status, a.Replayed, a.Body, as[0].Body)
		}
	}
}

// role returns the node's Raft state ("Leader", "Follower", ...).
func role(n *node) string {
	st, err := n.Client().ClusterStatus(context.Background())
	if err != nil {
		return ""
	}
	return st.State
}

func TestClusterFrozenFollowerCatchesUp(t *testing.T) {
	c := startCluster(t)
	var frozen *node
	var live []*node
	for _, n := range c.nodes {
		if frozen == nil && role(n) == "Follower" {
			frozen = n
		} else {
			live = append(live, n)
		}
	}
	if frozen == nil {
		t.Fatal("no follower")
	}
	frozen.Signal(syscall.SIGSTOP)
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			frozen.Signal(syscall.SIGCONT)
		}
	}
	defer thaw()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// For 15 s the two others keep taking named creates.
	end := time.Now().Add(15 * time.Second)
	made := 0
	for i := 0; time.Now().Before(end); i++ {
		n := live[i%len(live)]
		a := call(ctx, n, http.MethodPost, "/v1/sandboxes", fmt.Sprintf(`{"name":"frozen-%d"}`, i), nil)
		if a.Status != 201 {
			t.Fatalf("create %d through %s while %s is frozen: %d %s %v", i, n.name, frozen.name, a.Status, a.Body, a.Err)
		}
		made++
	}
	t.Logf("%d named creates while %s was frozen", made, frozen.name)
	thaw()
	c.digests(30 * time.Second)
	st, err := frozen.Client().ClusterStatus(ctx)
	if err != nil || st.Names < made {
		t.Fatalf("thawed node status %+v %v, want at least %d names", st, err, made)
	}
}

func TestClusterE2BIdenticalCreatesAcrossNodes(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Twelve identical creates with one key, split over the three nodes,
	// make one sandbox: the body's fingerprint sends them all to one owner,
	// whose claim decides them.
	as := storm(c, 12, func(i int, nd *node) harness.Answer {
		return call(ctx, nd, http.MethodPost, "/e2b/sandboxes", `{"templateID":"base","metadata":{"storm":"e2b"},"timeout":120}`,
			map[string]string{"X-API-KEY": clusterToken})
	})
	t.Logf("answers: %v", tally(as))
	ids := map[string]bool{}
	for i, a := range as {
		if a.Status != 201 && a.Status != 200 {
			t.Fatalf("answer %d: %d %s %v", i, a.Status, a.Body, a.Err)
		}
		var sb struct {
			SandboxID string `json:"sandboxID"`
		}
		_ = json.Unmarshal(a.Body, &sb)
		ids[sb.SandboxID] = true
	}
	total := 0
	for _, n := range c.nodes {
		total += len(n.Containers(t))
	}
	if len(ids) != 1 || total != 1 {
		t.Fatalf("%d sandbox ids %v and %d containers, want one", len(ids), ids, total)
	}
}

func TestClusterElectionAndLostQuorum(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The Go client's retries (same key) ride through an election: the
	// leader dies and a create sent at once through another node succeeds.
	var leader *node
	var rest []*node
	for _, n := range c.nodes {
		if role(n) == "Leader" {
			leader = n
		} else {
			rest = append(rest, n)
		}
	}
	leader.Kill()
	start := time.Now()
	sb, err := rest[0].Client().Create(ctx, client.CreateRequest{Name: "through-election"})
	if err != nil {
		t.Fatalf("create during the election: %v", err)
	}
	t.Logf("create through the election took %s", time.Since(start).Round(time.Millisecond))
	if got, err := rest[1].Client().Get(ctx, sb.ID); err != nil || got.Name != "through-election" {
		t.Fatalf("get from the other survivor: %+v %v", got, err)
	}

	// Without a quorum no write succeeds, and the API says why.
	rest[0].Kill()
	last := rest[1]
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, last.URL()+"/v1/sandboxes", strings.NewReader(`{"name":"no-quorum"}`))
	req.Header.Set("Authorization", "Bearer "+last.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := harness.Answer{Status: resp.StatusCode, Body: b}
	if a.Status != http.StatusServiceUnavailable || a.Code() != "no_leader" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("create without quorum: %d %s Retry-After %q, want 503 no_leader with Retry-After", a.Status, b, resp.Header.Get("Retry-After"))
	}
	for _, n := range c.nodes {
		for _, id := range n.Containers(t) {
			if len(n.Containers(t, "sandpit.sandbox-id="+sb.ID)) == 0 {
				t.Fatalf("container %s made without quorum", id)
			}
		}
	}
}

// TestHarnessRetriesAStartWhosePortWasTaken: a port the harness chose can be
// taken by another process before the daemon binds it. The daemon then
// exits at start, and the harness starts it again on ports chosen afresh
// instead of failing the test.
func TestHarnessRetriesAStartWhosePortWasTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	key := writeKey(t, "the test cluster's shared secret")
	attempts := 0
	d := harness.Start(t, sandpitBin, harness.Options{
		Env:   []string{"SANDPIT_TEST_CLUSTER_FAST=1"},
		Token: clusterToken,
		PortArgs: func() []string {
			attempts++
			gossip := loopback(t)
			if attempts == 1 {
				gossip = taken.Addr().String()
			}
			return append(clusterArgs("solo", gossip, loopback(t), key, 0, nil), "--bootstrap")
		},
	})
	if attempts != 2 {
		t.Fatalf("%d start attempts, want 2 (the first on the taken port)", attempts)
	}
	if _, err := d.Client().ClusterStatus(context.Background()); err != nil {
		t.Fatalf("the daemon started on the second attempt does not answer: %v", err)
	}
}
