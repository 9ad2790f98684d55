package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkNamedCreate times a named create (201) sent to the leader of a
// three node cluster, to a follower, and to a daemon without --cluster, in
// one run so the figures compare. Each sandbox is deleted outside the timer.
// Run with -benchtime=20x.
func BenchmarkNamedCreate(b *testing.B) {
	run := func(b *testing.B, entry *node, del func(id string) *node) {
		ctx := context.Background()
		var samples []time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			name := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
			start := time.Now()
			a := call(ctx, entry, http.MethodPost, "/v1/sandboxes", fmt.Sprintf(`{"name":%q}`, name), nil)
			if a.status != 201 {
				b.Fatalf("create: %d %s %v", a.status, a.body, a.err)
			}
			samples = append(samples, time.Since(start))
			b.StopTimer()
			if d := call(ctx, del(a.id()), http.MethodDelete, "/v1/sandboxes/"+a.id(), "", nil); d.status >= 300 {
				b.Fatalf("delete: %d %s", d.status, d.body)
			}
			b.StartTimer()
		}
		b.StopTimer()
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(samples[(len(samples)-1)*95/100].Microseconds())/1000, "p95-ms")
	}

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
