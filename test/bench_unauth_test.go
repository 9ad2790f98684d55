package sandpit_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkUnauthenticatedSignedFiles: with 200 running sandboxes, 50
// clients sending made-up signed /files URLs as fast as they are answered
// (each one checked against every running sandbox's token, since a signed
// URL names no sandbox) leave the p99 of other API calls within 2x of the
// idle p99. The per-client rate limit is turned off, so the flood reaches
// the lookup itself rather than the limiter's 429. Reported: the idle and
// the flooded p99 of GET /v1/sandboxes/{id}, their ratio, and the flood's
// answers per second.
//
//	go test -run '^$' -bench UnauthenticatedSignedFiles -benchtime 1x -timeout 30m ./test/
func BenchmarkUnauthenticatedSignedFiles(b *testing.B) {
	const (
		running = 200
		flood   = 50
		samples = 1000
	)
	d := harness.Start(b, sandpitBin, harness.Options{Args: []string{"--unauth-rate-limit", "0", "--auth-failure-rate-limit", "0"}})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: flood + 4}}
	ids := make([]string, running)
	var wg sync.WaitGroup
	work := make(chan int)
	var createErr atomic.Value
	// create makes sandbox i; a create the engine was too slow for (a
	// 5xx on a loaded machine) is retried with the same Idempotency-Key,
	// which makes no second sandbox.
	create := func(i int) (string, error) {
		var last string
		for range 4 {
			req, _ := http.NewRequest(http.MethodPost, d.URL()+"/v1/sandboxes", strings.NewReader(`{"labels":{"bench":"unauth"}}`))
			req.Header.Set("Authorization", "Bearer "+d.Token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "bench-unauth-"+strconv.Itoa(i))
			resp, err := hc.Do(req)
			if err != nil {
				last = err.Error()
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK {
				return harness.Answer{Body: body}.ID(), nil
			}
			last = resp.Status + " " + string(body)
			if resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict {
				break
			}
			time.Sleep(time.Second)
		}
		return "", errors.New(last)
	}
	for range 8 {
		wg.Go(func() {
			for i := range work {
				id, err := create(i)
				if err != nil {
					createErr.Store(err.Error())
					continue
				}
				ids[i] = id
			}
		})
	}
	for i := range running {
		work <- i
	}
	close(work)
	wg.Wait()
	if e := createErr.Load(); e != nil {
		b.Fatalf("create: %v", e)
	}

	// measure times n sequential reads of one sandbox, the "other API
	// call" a tenant makes while the flood goes on.
	measure := func(n int) time.Duration {
		lat := make([]time.Duration, 0, n)
		for i := range n {
			start := time.Now()
			benchCall(b, hc, d, http.MethodGet, "/v1/sandboxes/"+ids[i%running], ``, "", http.StatusOK)
			lat = append(lat, time.Since(start))
		}
		return harness.Percentile(lat, 0.99)
	}

	b.ResetTimer()
	var idle, flooded time.Duration
	var answered atomic.Int64
	var floodTime time.Duration
	for range b.N {
		measure(20) // warm the connection and the caches
		idle = measure(samples)

		ctx, stop := context.WithCancel(b.Context())
		var fw sync.WaitGroup
		for range flood {
			fw.Go(func() {
				fc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
				var sig [32]byte
				for ctx.Err() == nil {
					_, _ = rand.Read(sig[:])
					q := url.Values{"path": {"/etc/passwd"}, "signature": {"v1_" + base64.RawStdEncoding.EncodeToString(sig[:])}}
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/files?"+q.Encode(), nil)
					resp, err := fc.Do(req)
					if err != nil {
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusUnauthorized && ctx.Err() == nil {
						b.Errorf("a made-up signature: %d, want 401", resp.StatusCode)
					}
					answered.Add(1)
				}
			})
		}
		time.Sleep(500 * time.Millisecond) // let the flood reach its pace
		start := time.Now()
		before := answered.Load()
		flooded = measure(samples)
		floodTime = time.Since(start)
		perSecond := float64(answered.Load()-before) / floodTime.Seconds()
		stop()
		fw.Wait()
		b.ReportMetric(perSecond, "flood-req/s")
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(idle), "idle-p99-ms")
	b.ReportMetric(ms(flooded), "flooded-p99-ms")
	b.ReportMetric(ms(flooded)/ms(idle), "p99-ratio")
	b.Logf("GET /v1/sandboxes/{id} p99: idle %v, under %d clients of made-up signed URLs %v (%.2fx), %d running sandboxes",
		idle, flood, flooded, ms(flooded)/ms(idle), running)

	for _, id := range ids {
		_ = d.Client().Delete(context.Background(), id)
	}
}
