package sandpit_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// serverTotal reads the "total" entry of a Server-Timing header.
func serverTotal(b *testing.B, header string) time.Duration {
	return serverPhase(b, header, "total")
}

// serverPhase is one named phase of a Server-Timing header.
func serverPhase(b *testing.B, header, phase string) time.Duration {
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if name != phase {
			continue
		}
		ms, err := strconv.ParseFloat(strings.TrimPrefix(params, "dur="), 64)
		if err != nil {
			b.Fatalf("Server-Timing %q: %v", header, err)
		}
		return time.Duration(ms * float64(time.Millisecond))
	}
	b.Fatalf("Server-Timing %q has no %s", header, phase)
	return 0
}

// BenchmarkCreateServerTiming times native creates on the server (the
// Server-Timing total) and on the client, cold (no pool) and warm (a pool of
// 10, waited for between creates, outside the timed section). Run both in
// one go: go test -run '^$' -bench CreateServerTiming -benchtime 40x ./test/
func BenchmarkCreateServerTiming(b *testing.B) {
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"cold", nil},
		{"warm", []string{"--warm-pool", "sandpit/base:test=10", "--warm-pool-refill", "2"}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			d := harness.Start(b, sandpitBin, harness.Options{Args: mode.args})
			warm := mode.args != nil
			if warm {
				awaitPool(b, d, 10, 120*time.Second)
			}
			server := make([]time.Duration, 0, b.N)
			client := make([]time.Duration, 0, b.N)
			store := make([]time.Duration, 0, b.N)
			agent := make([]time.Duration, 0, b.N)
			var ids []string
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if warm {
					b.StopTimer()
					awaitPool(b, d, 1, 60*time.Second)
					b.StartTimer()
				}
				start := time.Now()
				sb, timing := poolCreate(b, d, apitypes.CreateRequest{Env: map[string]string{"I": strconv.Itoa(i)}, Labels: map[string]string{"bench": "pool"}}, "")
				client = append(client, time.Since(start))
				if b.Failed() {
					b.FailNow()
				}
				if warm != strings.Contains(timing, "desc=warm") {
					b.Fatalf("create %d: Server-Timing %q, want warm=%v", i, timing, warm)
				}
				server = append(server, serverTotal(b, timing))
				store = append(store, serverPhase(b, timing, "store"))
				agent = append(agent, serverPhase(b, timing, "agent"))
				ids = append(ids, sb.ID)
				b.StopTimer()
				if len(ids) >= 10 {
					for _, id := range ids {
						_ = d.Client().Delete(b.Context(), id)
					}
					ids = ids[:0]
				}
				b.StartTimer()
			}
			b.StopTimer()
			harness.ReportPercentiles(b, "server", server)
			harness.ReportPercentiles(b, "client", client)
			harness.ReportPercentiles(b, "store", store)
			harness.ReportPercentiles(b, "agent", agent)
		})
	}
}

// BenchmarkPoolBurst sends a burst of 50 concurrent creates at a full pool
// of 10 and reports the hit rate and how long the pool takes to be full
// again after the burst. It runs once whatever b.N is.
func BenchmarkPoolBurst(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{Args: []string{"--warm-pool", "sandpit/base:test=10", "--warm-pool-refill", "2"}})
	awaitPool(b, d, 10, 120*time.Second)
	b.ResetTimer()
	const n = 50
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		warm int
	)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, timing := poolCreate(b, d, apitypes.CreateRequest{Labels: map[string]string{"burst": fmt.Sprint(i)}}, "")
			if strings.Contains(timing, "desc=warm") {
				mu.Lock()
				warm++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	burst := time.Since(start)
	refill := awaitPool(b, d, 10, 180*time.Second)
	b.StopTimer()
	b.ReportMetric(float64(warm)/n*100, "hit-%")
	b.ReportMetric(float64(burst.Milliseconds()), "burst-ms")
	b.ReportMetric(float64(refill.Milliseconds()), "refill-ms")
}
