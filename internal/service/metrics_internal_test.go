package service

import (
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/driver"
)

// The history's bounds, without an engine: samples per sandbox are capped,
// out-of-order samples are dropped, and sandboxes not sampled for a whole
// history's span are forgotten.
func TestMetricsHistoryBounds(t *testing.T) {
	h := NewMetricsHistory(nil, time.Second, 3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) driver.Stats {
		return driver.Stats{Timestamp: t0.Add(time.Duration(s) * time.Second), MemUsed: int64(s)}
	}
	for s := range 5 {
		h.record("a", at(s))
	}
	h.record("a", at(2)) // older than the newest: a late concurrent sample
	h.record("b", at(1))
	got := h.samples["a"]
	if len(got) != 3 || got[0].MemUsed != 2 || got[2].MemUsed != 4 {
		t.Fatalf("history of a: %+v, want samples 2, 3, 4", got)
	}
	h.prune(t0.Add(2 * time.Second))
	if _, ok := h.samples["b"]; ok {
		t.Fatal("b, last sampled before the cutoff, is still kept")
	}
	if len(h.samples["a"]) != 3 {
		t.Fatal("a was pruned")
	}
}
