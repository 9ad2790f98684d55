package cluster_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkFacadeList times the E2B and Daytona listings of six sandboxes
// on a daemon without --cluster and through a node of a three node cluster
// (which asks every node and merges), in one run so the figures compare.
// Run with -benchtime=200x.
func BenchmarkFacadeList(b *testing.B) {
	run := func(b *testing.B, n *node, path string, hdr map[string]string) {
		ctx := context.Background()
		samples := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			if a := call(ctx, n, http.MethodGet, path, "", hdr); a.Status != 200 {
				b.Fatalf("%s: %d %s %v", path, a.Status, a.Body, a.Err)
			}
			samples = append(samples, time.Since(start))
		}
		b.StopTimer()
		harness.ReportPercentiles(b, "", samples)
	}
	fill := func(n *node) {
		for range 6 {
			if a := call(context.Background(), n, http.MethodPost, "/v1/sandboxes", `{}`, nil); a.Status != 201 {
				b.Fatalf("create: %d %s", a.Status, a.Body)
			}
		}
	}
	key := map[string]string{"X-API-KEY": clusterToken}
	single := &node{Daemon: harness.Start(b, sandpitBin, harness.Options{Token: clusterToken})}
	fill(single)
	b.Run("single-node/e2b", func(b *testing.B) { run(b, single, "/e2b/v2/sandboxes", key) })
	b.Run("single-node/daytona", func(b *testing.B) { run(b, single, "/daytona/sandbox", nil) })
	c := startCluster(b)
	fill(c.nodes[0])
	b.Run("cluster/e2b", func(b *testing.B) { run(b, c.nodes[0], "/e2b/v2/sandboxes", key) })
	b.Run("cluster/daytona", func(b *testing.B) { run(b, c.nodes[0], "/daytona/sandbox", nil) })
}
