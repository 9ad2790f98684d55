package sandpit_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkAPIUnderIdleFlood: the p99 of an authenticated API call (GET
// /v1/sandboxes from 127.0.0.2) while idle connections are held to the
// preview proxy and to the API, beside its p99 with none held. The flood
// comes from many loopback sources, 400 connections each (below the
// default per-source share of 512, so the connections are held rather than
// refused), up to SANDPIT_BENCH_FLOOD connections in all (default 8,000:
// the test process needs a descriptor each, so 20,000 needs a higher
// ulimit -n than this machine's 20,000). Reported: the idle and the
// flooded p99 in ms and the daemon's descriptors while flooded.
//
//	go test -run '^$' -bench APIUnderIdleFlood -benchtime 1x ./test/
func BenchmarkAPIUnderIdleFlood(b *testing.B) {
	flood := 8000
	if v, err := strconv.Atoi(os.Getenv("SANDPIT_BENCH_FLOOD")); err == nil && v > 0 {
		flood = v
	}
	const perSource, samples = 400, 500
	d := harness.Start(b, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := sourceClient(d, "127.0.0.2")
	for range 3 {
		if _, err := c.Create(ctx, client.CreateRequest{}); err != nil {
			b.Fatal(err)
		}
	}
	p99 := func() time.Duration {
		ds := make([]time.Duration, 0, samples)
		for range samples {
			t0 := time.Now()
			if _, _, err := c.List(ctx, client.ListOptions{}); err != nil {
				b.Fatalf("API call: %v", err)
			}
			ds = append(ds, time.Since(t0))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)*99/100]
	}
	for range b.N {
		idle := p99()
		for i := 0; i*perSource < flood; i++ {
			src := fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
			addr := d.ProxyAddr
			if i%2 == 1 {
				addr = d.Addr
			}
			holdConns(b, src, addr, min(perSource, flood-i*perSource), "")
		}
		fds := openFDs(b, d)
		flooded := p99()
		b.ReportMetric(float64(idle.Microseconds())/1000, "idle-p99-ms")
		b.ReportMetric(float64(flooded.Microseconds())/1000, "flooded-p99-ms")
		b.ReportMetric(float64(fds), "daemon-fds")
	}
}
