package harness

import (
	"testing"
	"time"
)

// TestPercentile checks the nearest rank on known inputs: counts where
// floor((n-1)*p) and ceil(p*n) disagree, an unsorted input, and the edges.
func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1 // 1..100 ms
	}
	thirty := make([]int, 30)
	for i := range thirty {
		thirty[i] = 10
	}
	thirty[17] = 500 // one slow call among 30
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"none", nil, 0.99, 0},
		{"one", ms(7), 0.5, 7 * time.Millisecond},
		{"one p99", ms(7), 0.99, 7 * time.Millisecond},
		{"p50 of four is the 2nd", ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{"p50 of five is the 3rd", ms(5, 4, 3, 2, 1), 0.5, 3 * time.Millisecond},
		{"p95 of 1..100 is 95", ms(hundred...), 0.95, 95 * time.Millisecond},
		{"p99 of 1..100 is 99", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p7 of 1..100 is 7", ms(hundred...), 0.07, 7 * time.Millisecond},
		{"p100 is the largest", ms(hundred...), 1, 100 * time.Millisecond},
		{"p99 of 30 is the slowest", ms(thirty...), 0.99, 500 * time.Millisecond},
		{"p95 of 30 is the 29th", ms(thirty...), 0.95, 10 * time.Millisecond},
		{"p0 is the smallest", ms(3, 1, 2), 0, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]time.Duration(nil), tc.samples...)
			if got := Percentile(tc.samples, tc.p); got != tc.want {
				t.Fatalf("Percentile(%v, %v) = %v, want %v", tc.samples, tc.p, got, tc.want)
			}
			for i := range before {
				if tc.samples[i] != before[i] {
					t.Fatalf("Percentile reordered its input: %v, was %v", tc.samples, before)
				}
			}
		})
	}
}

func TestMillis(t *testing.T) {
	if got := Millis(1500 * time.Microsecond); got != 1.5 {
		t.Fatalf("Millis(1.5ms) = %v, want 1.5", got)
	}
}
