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
// default per-source share of 512, so no source is refused for itself),
// half to each listener, SANDPIT_BENCH_FLOOD connections in all (default
// 20,000), held by holder processes (RLIMIT_NOFILE is per process). A
// daemon whose descriptor limit is 20,000 holds its listeners' shares of
// them and closes the oldest idle ones to make room for the rest.
// Reported: the idle and the flooded p99 in ms, the connections dialled and
// the daemon's descriptors while flooded.
//
//	go test -run '^$' -bench APIUnderIdleFlood -benchtime 1x ./test/
func BenchmarkAPIUnderIdleFlood(b *testing.B) {
	flood := 20000
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
		var toProxy, toAPI []string
		for i := 0; i*perSource < flood; i++ {
			src := fmt.Sprintf("127.46.%d.%d", 1+i/250, 1+i%250)
			if i%2 == 0 {
				toProxy = append(toProxy, src)
			} else {
				toAPI = append(toAPI, src)
			}
		}
		dialled := holdConnsApart(b, d.ProxyAddr, perSource, toProxy...) + holdConnsApart(b, d.Addr, perSource, toAPI...)
		fds := openFDs(b, d)
		flooded := p99()
		b.ReportMetric(float64(idle.Microseconds())/1000, "idle-p99-ms")
		b.ReportMetric(float64(flooded.Microseconds())/1000, "flooded-p99-ms")
		b.ReportMetric(float64(dialled), "dialled")
		b.ReportMetric(float64(fds), "daemon-fds")
	}
}
