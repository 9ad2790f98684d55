package sandpit_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkExposePort measures POST /v1/sandboxes/{id}/ports end to end (the
// HTTP API, the store and the builtin router's TCP listener) with the host
// port pool of 1000 ports first almost empty and then 90% full:
//
//   - retry: exposing a port that is already exposed. The store answers
//     Existing on the first candidate, so a retry costs the same however full
//     the pool is.
//   - first: exposing a new port. At 90% the allocator's random candidates
//     mostly hit taken ports and it walks on to its scan; each exposure is
//     unexposed again (untimed) to keep the pool as full as it was.
//
// Run it with a fixed count so the percentiles have enough samples:
//
//	go test -run '^$' -bench BenchmarkExposePort -benchtime 2000x ./test/
func BenchmarkExposePort(b *testing.B) {
	const poolSize = 1000
	d := harness.Start(b, sandpitBin, harness.Options{PortRange: harness.FreeRange(b, poolSize)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	sb, err := d.Client().Create(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	id := sb.ID

	exposed := 0 // sandbox ports 10000.. are exposed up to 10000+exposed
	for _, pct := range []int{0, 90} {
		// Fill the pool through the API, a few requests at a time; the
		// retried exposure (port 10000) is always among them.
		target := max(1, poolSize*pct/100)
		var wg sync.WaitGroup
		next := make(chan int)
		errs := make(chan string, target)
		for range 4 {
			wg.Go(func() {
				for port := range next {
					r, err := expose(ctx, d, id, port, "tcp")
					if err != nil || r.status != http.StatusCreated {
						errs <- "fill port " + strconv.Itoa(port) + ": " + strconv.Itoa(r.status) + " " + r.msg
					}
				}
			})
		}
		for ; exposed < target; exposed++ {
			next <- 10000 + exposed
		}
		close(next)
		wg.Wait()
		close(errs)
		for e := range errs {
			b.Fatal(e)
		}
		name := "pool-" + strconv.Itoa(pct) + "pct"
		b.Run(name+"/retry", func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				r, err := expose(ctx, d, id, 10000, "tcp")
				lat = append(lat, time.Since(start))
				if err != nil || r.status != http.StatusOK {
					b.Fatalf("retry: %d %s %v", r.status, r.msg, err)
				}
			}
			harness.ReportPercentiles(b, "", lat)
		})
		b.Run(name+"/first", func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				port := 20000 + i%1000
				start := time.Now()
				r, err := expose(ctx, d, id, port, "tcp")
				lat = append(lat, time.Since(start))
				if err != nil || r.status != http.StatusCreated {
					b.Fatalf("first expose of %d: %d %s %v", port, r.status, r.msg, err)
				}
				b.StopTimer()
				status, _, msg, err := postJSON(ctx, d, http.MethodDelete, "/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(port), "", nil)
				if err != nil || status != http.StatusNoContent {
					b.Fatalf("unexpose %d: %d %s %v", port, status, msg, err)
				}
				b.StartTimer()
			}
			harness.ReportPercentiles(b, "", lat)
		})
	}
}
