package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// poolOf reads one node's warm pool status.
func poolOf(t testing.TB, ctx context.Context, n *node) apitypes.WarmPoolStatus {
	t.Helper()
	a := call(ctx, n, http.MethodGet, "/v1/pool", "", nil)
	var st apitypes.WarmPoolStatus
	if a.Status != http.StatusOK || json.Unmarshal(a.Body, &st) != nil || len(st.Pools) != 1 {
		t.Fatalf("pool of %s: %d %s %v", n.name, a.Status, a.Body, a.Err)
	}
	return st
}

// hits is every node's pool hit count, by node name.
func (c *testCluster) hits(t testing.TB, ctx context.Context) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, n := range c.nodes {
		out[n.name] = poolOf(t, ctx, n).Hits
	}
	return out
}

// awaitPools waits until every node's pool holds size ready free slots and
// makes none.
func (c *testCluster) awaitPools(t testing.TB, ctx context.Context, size int, d time.Duration) {
	t.Helper()
	testkit.Eventually(t, d, "", func() error {
		for _, n := range c.nodes {
			if p := poolOf(t, ctx, n).Pools[0]; p.Ready != size || p.Starting != 0 {
				return fmt.Errorf("pool of %s: %+v, want %d ready", n.name, p, size)
			}
		}
		return nil
	})
}

// pooledFree lists a node's free pooled containers (by name), as its debug
// state reports its pool's slots.
func pooledFree(t *testing.T, ctx context.Context, n *node) []string {
	t.Helper()
	st, err := n.State(ctx)
	if err != nil {
		t.Fatalf("state of %s: %v", n.name, err)
	}
	var out []string
	for _, sl := range st.PoolSlots {
		if sl.SandboxID == "" {
			out = append(out, sl.ContainerID)
		}
	}
	slices.Sort(out)
	return out
}

// holders counts, on every serving node, the containers that hold sandbox
// id (labelled with it, or the pooled container it adopted).
func (c *testCluster) holders(t *testing.T, ctx context.Context, id string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range c.nodes {
		got, err := n.SandboxContainers(ctx, id)
		if err != nil {
			t.Fatalf("containers of %s on %s: %v", id, n.name, err)
		}
		if len(got) > 0 {
			out[n.name] = len(got)
		}
	}
	return out
}

// TestClusterWarmPool: every node of a three-node cluster keeps a warm pool.
// Named, unnamed and keyed creates through every node are each served by the
// pool of the node placement chose, on that node alone; a taken name is
// refused without spending a pooled container; the pools refill; a keyed
// retry through another node replays without a second adoption. A pooled
// sandbox of a killed node is re-created elsewhere (from that node's pool),
// and the returning node keeps its own free pooled containers, removes its
// stale copy and leaves the other nodes' pooled containers alone. Deleting
// releases every placement and name, and the nodes and the index agree.
func TestClusterWarmPool(t *testing.T) {
	const size, grace = 2, 3 * time.Second
	c := startClusterWith(t, func(string) []string {
		return []string{"--warm-pool", fmt.Sprintf("sandpit/base:test=%d", size),
			"--failover", "recreate", "--dead-node-grace", grace.String()}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c.awaitPools(t, ctx, size, 2*time.Minute)

	type made struct {
		sb        sandboxView
		body, key string
		entry     *node
	}
	var all []made
	// Each create waits for full pools first, so every one must be warm,
	// whichever node placement picks.
	for i, entry := range c.nodes {
		for _, kind := range []string{"named", "unnamed", "keyed"} {
			c.awaitPools(t, ctx, size, time.Minute)
			before := c.hits(t, ctx)
			body, key := `{"env":{"POOL_ENV":"adopted"}}`, ""
			switch kind {
			case "named":
				body = fmt.Sprintf(`{"name":"pool-%d","env":{"POOL_ENV":"adopted"}}`, i)
			case "keyed":
				key = fmt.Sprintf("pool-key-%d-%d", i, time.Now().UnixNano())
			}
			var hdr map[string]string
			if key != "" {
				hdr = map[string]string{"Idempotency-Key": key}
			}
			a := call(ctx, entry, http.MethodPost, "/v1/sandboxes", body, hdr)
			if a.Status != http.StatusCreated {
				t.Fatalf("%s create through %s: %d %s %v", kind, entry.name, a.Status, a.Body, a.Err)
			}
			sb := view(t, a)
			after := c.hits(t, ctx)
			for _, n := range c.nodes {
				want := before[n.name]
				if n.name == sb.Node {
					want++
				}
				if after[n.name] != want {
					t.Fatalf("%s create through %s placed on %s: pool hits %v -> %v, want one hit on %s alone",
						kind, entry.name, sb.Node, before, after, sb.Node)
				}
			}
			if got := c.holders(t, ctx, sb.ID); len(got) != 1 || got[sb.Node] != 1 {
				t.Fatalf("%s sandbox %s placed on %s is held by %v", kind, sb.ID, sb.Node, got)
			}
			all = append(all, made{sb: sb, body: body, key: key, entry: entry})
		}
	}
	placed := map[string]int{}
	for _, m := range all {
		placed[m.sb.Node]++
	}
	t.Logf("warm creates per node: %v", placed)

	// A taken name is refused on every node, and spends no pooled
	// container; a keyed retry through another node replays, without a
	// second adoption.
	c.awaitPools(t, ctx, size, time.Minute)
	before := c.hits(t, ctx)
	for i, n := range c.nodes {
		if a := call(ctx, n, http.MethodPost, "/v1/sandboxes", `{"name":"pool-0"}`, nil); a.Status != http.StatusConflict || a.Code() != apitypes.CodeNameConflict {
			t.Fatalf("create of a taken name through %s: %d %s, want 409 name_conflict", n.name, a.Status, a.Body)
		}
		for _, m := range all {
			if m.key == "" || m.entry == n {
				continue
			}
			a := call(ctx, n, http.MethodPost, "/v1/sandboxes", m.body, map[string]string{"Idempotency-Key": m.key})
			if a.Status >= 300 || a.ID() != m.sb.ID || !a.Replayed {
				t.Fatalf("retry %d of %s through %s: %d %s, want a replay of %s", i, m.key, n.name, a.Status, a.Body, m.sb.ID)
			}
		}
	}
	if after := c.hits(t, ctx); !maps.Equal(before, after) {
		t.Fatalf("pool hits %v -> %v across refused and replayed creates", before, after)
	}
	// Thirty creates of one new name at once through the three nodes: one
	// wins and adopts one pooled container; the losers are refused by the
	// index before they reach any pool.
	c.awaitPools(t, ctx, size, time.Minute)
	before = c.hits(t, ctx)
	as := storm(c, 30, func(_ int, nd *node) harness.Answer {
		return call(ctx, nd, http.MethodPost, "/v1/sandboxes", `{"name":"pool-contested"}`, nil)
	})
	if got := tally(as); got["201"] != 1 || got["409 name_conflict"] != 29 {
		t.Fatalf("contested creates: %v, want one 201 and 29 409 name_conflict", got)
	}
	var won harness.Answer
	for _, a := range as {
		if a.Status == http.StatusCreated {
			won = a
		}
	}
	winner := view(t, won)
	if after := c.hits(t, ctx); after[winner.Node] != before[winner.Node]+1 || sum(after) != sum(before)+1 {
		t.Fatalf("contested creates: pool hits %v -> %v, want one hit on %s", before, after, winner.Node)
	}
	if a := call(ctx, c.nodes[2], http.MethodDelete, "/v1/sandboxes/"+winner.ID, "", nil); a.Status != http.StatusNoContent {
		t.Fatalf("delete %s: %d %s", winner.ID, a.Status, a.Body)
	}
	// Thirty creates with one key at once: one sandbox, one adoption.
	c.awaitPools(t, ctx, size, time.Minute)
	before = c.hits(t, ctx)
	stormKey := map[string]string{"Idempotency-Key": fmt.Sprintf("pool-storm-%d", time.Now().UnixNano())}
	as = storm(c, 30, func(_ int, nd *node) harness.Answer {
		return call(ctx, nd, http.MethodPost, "/v1/sandboxes", `{"labels":{"storm":"keyed"}}`, stormKey)
	})
	ids := map[string]bool{}
	for _, a := range as {
		// A retry that finds the first attempt in flight may be told to
		// come back (409 or 503); every success is the same sandbox.
		if a.Status < 300 {
			ids[a.ID()] = true
		}
	}
	if len(ids) != 1 {
		t.Fatalf("keyed storm: %v made %d sandboxes %v, want one", tally(as), len(ids), ids)
	}
	if after := c.hits(t, ctx); sum(after) != sum(before)+1 {
		t.Fatalf("keyed storm: pool hits %v -> %v, want one adoption", before, after)
	}
	for id := range ids {
		if got := c.holders(t, ctx, id); len(got) != 1 {
			t.Fatalf("keyed storm's sandbox %s is held by %v", id, got)
		}
		if a := call(ctx, c.nodes[0], http.MethodDelete, "/v1/sandboxes/"+id, "", nil); a.Status != http.StatusNoContent {
			t.Fatalf("delete %s: %d %s", id, a.Status, a.Body)
		}
	}
	for _, n := range c.nodes {
		all, err := listAll(ctx, n)
		if err != nil || len(all) != 9 {
			t.Fatalf("list through %s: %d sandboxes, %v", n.name, len(all), err)
		}
		n.CheckConsistent(t)
	}

	// Kill a node that holds an adopted sandbox: it is re-created on a
	// survivor, which adopts from its own pool.
	var victim made
	for _, m := range all {
		if m.sb.Node == "n3" {
			victim = m
			break
		}
	}
	n3 := c.byName("n3")
	if victim.sb.ID == "" {
		// Placement put none of the nine on n3: one more through it, until
		// one lands there.
		for range 20 {
			c.awaitPools(t, ctx, size, time.Minute)
			a := call(ctx, c.nodes[0], http.MethodPost, "/v1/sandboxes", `{"env":{"POOL_ENV":"adopted"}}`, nil)
			if a.Status != http.StatusCreated {
				t.Fatalf("create: %d %s", a.Status, a.Body)
			}
			m := made{sb: view(t, a)}
			all = append(all, m)
			if m.sb.Node == "n3" {
				victim = m
				break
			}
		}
		if victim.sb.ID == "" {
			t.Fatal("no create landed on n3")
		}
	}
	// The victim is n3's only sandbox, so its re-creation finds a full pool
	// wherever it goes.
	kept := all[:0]
	for _, m := range all {
		if m.sb.Node == "n3" && m.sb.ID != victim.sb.ID {
			if a := call(ctx, c.nodes[0], http.MethodDelete, "/v1/sandboxes/"+m.sb.ID, "", nil); a.Status != http.StatusNoContent {
				t.Fatalf("delete %s: %d %s", m.sb.ID, a.Status, a.Body)
			}
			continue
		}
		kept = append(kept, m)
	}
	all = kept
	c.awaitPools(t, ctx, size, time.Minute)
	freeBefore := map[string][]string{}
	for _, n := range c.nodes {
		freeBefore[n.name] = pooledFree(t, ctx, n)
	}
	survivors := []*node{c.nodes[0], c.nodes[1]}
	hitsBefore := c.hits(t, ctx)
	kill(t, n3)
	now := awaitMoved(t, ctx, grace+30*time.Second, victim.sb.ID, "n3", survivors...)
	owner := c.byName(now.Node)
	if now.ID != victim.sb.ID || now.Name != victim.sb.Name || now.Env["POOL_ENV"] != "adopted" {
		t.Fatalf("re-created as %+v, want the id, name and env of %+v", now, victim.sb)
	}
	if got := poolOf(t, ctx, owner).Hits; got != hitsBefore[owner.name]+1 {
		t.Fatalf("re-creation on %s: pool hits %d -> %d, want one adoption", owner.name, hitsBefore[owner.name], got)
	}
	if st, err := owner.State(ctx); err != nil || !slices.ContainsFunc(st.PoolSlots, func(sl apitypes.DebugPoolSlot) bool { return sl.SandboxID == victim.sb.ID }) {
		t.Fatalf("re-created %s does not run in a pooled container of %s: %+v %v", victim.sb.ID, owner.name, st.PoolSlots, err)
	}
	res, err := owner.Client().Exec(ctx, victim.sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $POOL_ENV"}})
	if err != nil || strings.TrimSpace(res.Stdout) != "adopted" {
		t.Fatalf("exec in the re-created sandbox: %+v %v", res, err)
	}

	// n3 comes back: it drops its stale copy before it serves, keeps its
	// free pooled containers and touches no other node's.
	n3.Restart(nil)
	c.waitFormed(30 * time.Second)
	if got := c.holders(t, ctx, victim.sb.ID); len(got) != 1 || got[owner.name] != 1 {
		t.Fatalf("containers of %s once n3 serves: %v, want one on %s", victim.sb.ID, got, owner.name)
	}
	if got := pooledFree(t, ctx, n3); !slices.Equal(got, freeBefore["n3"]) {
		t.Fatalf("n3's free pooled containers after its return: %v, want its own %v kept", got, freeBefore["n3"])
	}
	// The survivors' pooled containers of before the kill are all still
	// on the engine (one of them now holds the re-created sandbox).
	for _, n := range survivors {
		for _, name := range freeBefore[n.name] {
			if out, err := exec.Command("docker", "inspect", "-f", "{{.State.Status}}", name).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "running" {
				t.Fatalf("%s's pooled container %s after n3's return: %s %v", n.name, name, out, err)
			}
		}
	}
	c.awaitPools(t, ctx, size, time.Minute)
	for _, n := range c.nodes {
		n.CheckConsistent(t)
	}

	// Deleting through a node that is not the owner releases each
	// placement: the id answers 404 everywhere and a name is free again.
	for i, m := range all {
		via := c.nodes[i%len(c.nodes)]
		if a := call(ctx, via, http.MethodDelete, "/v1/sandboxes/"+m.sb.ID, "", nil); a.Status != http.StatusNoContent {
			t.Fatalf("delete %s through %s: %d %s", m.sb.ID, via.name, a.Status, a.Body)
		}
	}
	testkit.Eventually(t, 10*time.Second, "", func() error {
		for _, n := range c.nodes {
			for _, m := range all {
				if a := call(ctx, n, http.MethodGet, "/v1/sandboxes/"+m.sb.ID, "", nil); a.Status != http.StatusNotFound {
					return fmt.Errorf("GET %s through %s after delete: %d", m.sb.ID, n.name, a.Status)
				}
			}
		}
		return nil
	})
	a := call(ctx, c.nodes[1], http.MethodPost, "/v1/sandboxes", `{"name":"pool-0"}`, nil)
	if a.Status != http.StatusCreated {
		t.Fatalf("create of a freed name: %d %s", a.Status, a.Body)
	}
	if d := call(ctx, c.nodes[2], http.MethodDelete, "/v1/sandboxes/"+a.ID(), "", nil); d.Status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", d.Status, d.Body)
	}
	c.awaitPools(t, ctx, size, time.Minute)
	for _, n := range c.nodes {
		n.CheckConsistent(t)
	}
	c.digests(10 * time.Second)
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// TestClusterWarmPoolCountsAgainstMaxSandboxes: an adopted sandbox counts
// against its node's --max-sandboxes like a cold one, and pooled containers
// do not: with one sandbox allowed per node and two pooled on each, three
// creates are warm, one per node, and the fourth is refused with
// no_capacity without spending a pooled container.
func TestClusterWarmPoolCountsAgainstMaxSandboxes(t *testing.T) {
	c := startClusterWith(t, func(string) []string {
		return []string{"--warm-pool", "sandpit/base:test=2", "--max-sandboxes", "1"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	testkit.Eventually(t, 20*time.Second, "", func() error {
		for _, n := range c.nodes {
			ms, err := n.Client().ClusterMembers(ctx)
			if err != nil {
				return err
			}
			for _, m := range ms {
				if m.MaxSandboxes != 1 {
					return fmt.Errorf("%s's ceiling is %d in the index", m.Name, m.MaxSandboxes)
				}
			}
		}
		return nil
	})
	c.awaitPools(t, ctx, 2, 2*time.Minute)
	placed := map[string]int{}
	for i := range 3 {
		a := call(ctx, c.nodes[i], http.MethodPost, "/v1/sandboxes", `{}`, nil)
		if a.Status != http.StatusCreated {
			t.Fatalf("create %d: %d %s", i, a.Status, a.Body)
		}
		placed[view(t, a).Node]++
	}
	if len(placed) != 3 {
		t.Fatalf("three creates placed %v, want one per node", placed)
	}
	hits := c.hits(t, ctx)
	if sum(hits) != 3 {
		t.Fatalf("pool hits %v, want three warm creates", hits)
	}
	for _, n := range c.nodes {
		if a := call(ctx, n, http.MethodPost, "/v1/sandboxes", `{}`, nil); a.Status != http.StatusServiceUnavailable || a.Code() != apitypes.CodeNoCapacity {
			t.Fatalf("create through %s on a full cluster: %d %s, want 503 no_capacity", n.name, a.Status, a.Body)
		}
	}
	if after := c.hits(t, ctx); !maps.Equal(after, hits) {
		t.Fatalf("refused creates moved pool hits %v -> %v", hits, after)
	}
	c.awaitPools(t, ctx, 2, time.Minute)
	for _, n := range c.nodes {
		n.CheckConsistent(t)
	}
}
