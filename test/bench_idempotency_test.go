package sandpit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// benchCall sends one request, optionally keyed, and fails the benchmark
// unless the status is want.
func benchCall(b *testing.B, hc *http.Client, d *harness.Daemon, method, path, body, key string, want int) []byte {
	req, err := http.NewRequestWithContext(context.Background(), method, d.URL()+path, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != want {
		b.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, out, want)
	}
	return out
}

// BenchmarkIdempotencyCreate times native creates with and without an
// Idempotency-Key, alternating them so drift in the engine hits both alike;
// one op is one create of each. The keyed create adds the claim, the
// recorded target and the stored response: three SQLite writes.
func BenchmarkIdempotencyCreate(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	hc := &http.Client{}
	run := time.Now().UnixNano()
	var plain, keyed []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range 2 {
			withKey := (i+j)%2 == 1
			key := ""
			if withKey {
				key = fmt.Sprintf("bench-create-%d-%d", run, i)
			}
			start := time.Now()
			body := benchCall(b, hc, d, http.MethodPost, "/v1/sandboxes", `{}`, key, http.StatusCreated)
			took := time.Since(start)
			b.StopTimer()
			if withKey {
				keyed = append(keyed, took)
			} else {
				plain = append(plain, took)
			}
			id := harness.Answer{Body: body}.ID()
			benchCall(b, hc, d, http.MethodDelete, "/v1/sandboxes/"+id, ``, "", http.StatusNoContent)
			b.StartTimer()
		}
	}
	b.StopTimer()
	p50plain, p50keyed := harness.Millis(harness.Percentile(plain, 0.5)), harness.Millis(harness.Percentile(keyed, 0.5))
	b.ReportMetric(p50plain, "unkeyed-p50-ms")
	b.ReportMetric(p50keyed, "keyed-p50-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(plain, 0.99)), "unkeyed-p99-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(keyed, 0.99)), "keyed-p99-ms")
	b.ReportMetric(p50keyed-p50plain, "overhead-p50-ms")
}

// BenchmarkIdempotencyOverhead isolates the layer's own cost on a request
// that does almost nothing else: stopping an already stopped sandbox, once
// without a key and once with a fresh key (claim, run, store the response).
func BenchmarkIdempotencyOverhead(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	hc := &http.Client{}
	id := harness.Answer{Body: benchCall(b, hc, d, http.MethodPost, "/v1/sandboxes", `{}`, "", http.StatusCreated)}.ID()
	path := "/v1/sandboxes/" + id + "/stop"
	benchCall(b, hc, d, http.MethodPost, path, ``, "", http.StatusOK)
	run := time.Now().UnixNano()
	var plain, keyed []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range 2 {
			key := ""
			if (i+j)%2 == 1 {
				key = fmt.Sprintf("bench-stop-%d-%d", run, i)
			}
			start := time.Now()
			benchCall(b, hc, d, http.MethodPost, path, ``, key, http.StatusOK)
			if key != "" {
				keyed = append(keyed, time.Since(start))
			} else {
				plain = append(plain, time.Since(start))
			}
		}
	}
	b.StopTimer()
	p50plain, p50keyed := harness.Millis(harness.Percentile(plain, 0.5)), harness.Millis(harness.Percentile(keyed, 0.5))
	b.ReportMetric(p50plain, "unkeyed-p50-ms")
	b.ReportMetric(p50keyed, "keyed-p50-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(plain, 0.99)), "unkeyed-p99-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(keyed, 0.99)), "keyed-p99-ms")
	b.ReportMetric(p50keyed-p50plain, "overhead-p50-ms")
}

// BenchmarkIdempotencyReplay times the replay of a completed keyed create:
// one claim that finds the stored response, and no Docker at all.
func BenchmarkIdempotencyReplay(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	hc := &http.Client{}
	key := fmt.Sprintf("bench-replay-%d", time.Now().UnixNano())
	first := benchCall(b, hc, d, http.MethodPost, "/v1/sandboxes", `{}`, key, http.StatusCreated)
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		got := benchCall(b, hc, d, http.MethodPost, "/v1/sandboxes", `{}`, key, http.StatusCreated)
		samples = append(samples, time.Since(start))
		if string(got) != string(first) {
			b.Fatalf("replay %s, want %s", got, first)
		}
	}
	b.StopTimer()
	b.ReportMetric(harness.Millis(harness.Percentile(samples, 0.5)), "p50-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(samples, 0.99)), "p99-ms")
}

// BenchmarkIdempotencyStorm sends 100 identical keyed creates at once; one op
// is one storm. The original (the one that ran) and the 99 duplicates (woken
// when it completes, then replayed) are timed from the same start, and the
// duplicates' lag behind the original's answer is reported: with in-process
// wake-up it is the cost of a replay, not of a poll interval.
func BenchmarkIdempotencyStorm(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	run := time.Now().UnixNano()
	const n = 100
	var originals, dups, lags []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("storm-%d-%d", run, i)
		type result struct {
			took     time.Duration
			replayed bool
			id       string
		}
		results := make(chan result, n)
		start := time.Now()
		for range n {
			go func() {
				req, _ := http.NewRequest(http.MethodPost, d.URL()+"/v1/sandboxes", strings.NewReader(`{}`))
				req.Header.Set("Authorization", "Bearer "+d.Token)
				req.Header.Set("Idempotency-Key", key)
				resp, err := hc.Do(req)
				if err != nil {
					b.Error(err)
					results <- result{}
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Errorf("storm create: %d %s", resp.StatusCode, body)
				}
				results <- result{time.Since(start), resp.Header.Get("Idempotent-Replayed") == "true", harness.Answer{Body: body}.ID()}
			}()
		}
		var orig time.Duration
		var these []time.Duration
		id := ""
		for range n {
			r := <-results
			if r.replayed {
				these = append(these, r.took)
			} else {
				orig, id = r.took, r.id
			}
		}
		b.StopTimer()
		originals = append(originals, orig)
		for _, t := range these {
			dups = append(dups, t)
			lags = append(lags, t-orig)
		}
		if len(these) != n-1 || id == "" {
			b.Fatalf("storm %d: %d replays and original %q, want %d and one original", i, len(these), id, n-1)
		}
		benchCall(b, hc, d, http.MethodDelete, "/v1/sandboxes/"+id, ``, "", http.StatusNoContent)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(harness.Millis(harness.Percentile(originals, 0.5)), "original-p50-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(dups, 0.5)), "dup-p50-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(dups, 0.99)), "dup-p99-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(lags, 0.5)), "dup-lag-p50-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(lags, 0.99)), "dup-lag-p99-ms")
}
