package service

import (
	"testing"
	"time"
)

// TestHealthDelay: the agent is asked every millisecond for its first
// 100 ms (when it usually gets ready), then with a back-off to 100 ms.
func TestHealthDelay(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		elapsed, prev, want time.Duration
	}{
		{0, 0, ms},
		{50 * ms, ms, ms},
		{99 * ms, ms, ms},
		{100 * ms, ms, 5 * ms},
		{110 * ms, 5 * ms, 10 * ms},
		{130 * ms, 10 * ms, 20 * ms},
		{time.Second, 80 * ms, 100 * ms},
		{10 * time.Second, 100 * ms, 100 * ms},
	} {
		if got := healthDelay(tc.elapsed, tc.prev); got != tc.want {
			t.Errorf("healthDelay(%s, %s) = %s, want %s", tc.elapsed, tc.prev, got, tc.want)
		}
	}
}
