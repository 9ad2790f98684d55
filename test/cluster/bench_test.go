package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkNamedCreate times a named create (201) sent to the leader of a
// three node cluster, to a follower, and to a daemon without --cluster, in
// one run so the figures compare. Each sandbox is deleted outside the timer.
// Run with -benchtime=20x.
func BenchmarkNamedCreate(b *testing.B) {
	run := func(b *testing.B, entry *node, del func(id string) *node) { timeCreates(b, entry, del, nil) }
	single := &node{Daemon: harness.Start(b, sandpitBin, harness.Options{})}
	b.Run("single-node", func(b *testing.B) { run(b, single, func(string) *node { return single }) })

	c := startCluster(b)
	var leader, follower *node
	for _, n := range c.nodes {
		if role(n) == "Leader" {
			leader = n
		} else {
			follower = n
		}
	}
	b.Run("cluster-via-leader", func(b *testing.B) { run(b, leader, func(string) *node { return leader }) })
	b.Run("cluster-via-follower", func(b *testing.B) { run(b, follower, func(string) *node { return follower }) })
}

// timeCreates times b.N named creates through entry and reports their p50
// and p95; each sandbox is deleted through del(id) outside the timer, after
// which settle (when not nil) runs outside the timer too.
func timeCreates(b *testing.B, entry *node, del func(id string) *node, settle func()) {
	ctx := context.Background()
	var samples []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		start := time.Now()
		a := call(ctx, entry, http.MethodPost, "/v1/sandboxes", fmt.Sprintf(`{"name":%q}`, name), nil)
		if a.Status != 201 {
			b.Fatalf("create: %d %s %v", a.Status, a.Body, a.Err)
		}
		samples = append(samples, time.Since(start))
		b.StopTimer()
		if d := call(ctx, del(a.ID()), http.MethodDelete, "/v1/sandboxes/"+a.ID(), "", nil); d.Status >= 300 {
			b.Fatalf("delete: %d %s", d.Status, d.Body)
		}
		if settle != nil {
			settle()
		}
		b.StartTimer()
	}
	b.StopTimer()
	harness.ReportPercentiles(b, "", samples)
}

// BenchmarkSpecRewrite times an E2B setTimeout sent to the sandbox's own
// node: on a daemon without --cluster, and on a cluster node, where the
// call also rewrites the sandbox's replicated spec (one Raft entry), so
// that a failover re-creates it with the new deadline. Both in one run so
// the figures compare. Run with -benchtime=50x.
func BenchmarkSpecRewrite(b *testing.B) {
	ctx := context.Background()
	// run creates a sandbox through entry and times setTimeout sent to the
	// node owner names as the one that runs it.
	run := func(b *testing.B, entry *node, owner func(a harness.Answer) *node) {
		a := call(ctx, entry, http.MethodPost, "/v1/sandboxes", `{}`, nil)
		if a.Status != 201 {
			b.Fatalf("create: %d %s %v", a.Status, a.Body, a.Err)
		}
		n, id := owner(a), a.ID()
		defer call(ctx, n, http.MethodDelete, "/v1/sandboxes/"+id, "", nil)
		key := map[string]string{"X-API-KEY": n.Token}
		samples := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if r := call(ctx, n, http.MethodPost, "/e2b/sandboxes/"+id+"/timeout", fmt.Sprintf(`{"timeout":%d}`, 600+i), key); r.Status != http.StatusNoContent {
				b.Fatalf("setTimeout: %d %s %v", r.Status, r.Body, r.Err)
			}
			samples = append(samples, time.Since(start))
		}
		b.StopTimer()
		harness.ReportPercentiles(b, "", samples)
	}
	single := &node{Daemon: harness.Start(b, sandpitBin, harness.Options{})}
	b.Run("single-node", func(b *testing.B) { run(b, single, func(harness.Answer) *node { return single }) })
	c := startCluster(b)
	b.Run("cluster-owner", func(b *testing.B) { run(b, c.nodes[0], func(a harness.Answer) *node { return c.byName(nodeOf(a)) }) })
}

// BenchmarkClusterPooledCreate times a named create sent to a follower of a
// three node cluster without a warm pool (cold) and with a pool of 3 on
// every node (warm; the pools are refilled between creates, outside the
// timer), in one run so the figures compare. Run with -benchtime=20x.
func BenchmarkClusterPooledCreate(b *testing.B) {
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"cold", nil},
		{"warm", []string{"--warm-pool", "sandpit/base:test=3"}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			c := startClusterWith(b, func(string) []string { return mode.args })
			var follower *node
			for _, n := range c.nodes {
				if role(n) != "Leader" {
					follower = n
				}
			}
			var settle func()
			if mode.args != nil {
				settle = func() { c.awaitPools(b, context.Background(), 3, time.Minute) }
				settle()
			}
			timeCreates(b, follower, func(string) *node { return follower }, settle)
		})
	}
}
