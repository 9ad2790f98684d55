package harness

import (
	"math"
	"slices"
	"testing"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 1) of samples by the
// nearest-rank method: the smallest sample such that at least p of all the
// samples are no larger, that is the ceil(p*n)-th smallest. It is 0 for no
// samples; samples is left as it was.
//
// Nearest rank, rather than the index floor((n-1)*p) the benchmarks used
// before, because benchmarks here run with small counts (-benchtime=30x):
// with 30 samples floor(29*0.99) is the 29th, so the one slow call a p99 is
// there to show was never reported, while nearest rank gives the 30th. It
// also always answers a latency that was measured, never one interpolated
// between two, and p50 of an even count no longer depends on which of two
// index formulas a benchmark happened to use.
func Percentile(samples []time.Duration, p float64) time.Duration {
	n := len(samples)
	if n == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	// The small epsilon keeps a product such as 0.07*100, which float64
	// makes 7.000000000000001, at rank 7 and not 8.
	rank := int(math.Ceil(p*float64(n) - 1e-9))
	return s[min(max(rank, 1), n)-1]
}

// Millis is d in milliseconds, the unit the benchmarks report latencies in.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ReportPercentiles adds the p50, p95 and p99 of samples, in milliseconds,
// to the benchmark's results as p50-ms, p95-ms and p99-ms, each name after
// prefix and a dash when prefix is not empty. No samples report nothing.
func ReportPercentiles(b *testing.B, prefix string, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	if prefix != "" {
		prefix += "-"
	}
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", 0.50}, {"p95", 0.95}, {"p99", 0.99}} {
		b.ReportMetric(Millis(Percentile(samples, q.p)), prefix+q.name+"-ms")
	}
}
