package daemon

import (
	"testing"

	"github.com/sandpit-dev/sandpit/internal/service"
)

func TestParseWarmPool(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want service.PoolSpec
		bad  bool
	}{
		{in: "sandpit/base:test=10", want: service.PoolSpec{Image: "sandpit/base:test", Size: 10}},
		{in: "base=2,user=user", want: service.PoolSpec{Image: "base", Size: 2, User: "user"}},
		{in: "img@sha256:ab=3,cpu=0.5,memory=512", want: service.PoolSpec{Image: "img@sha256:ab", Size: 3, CPU: 0.5, MemoryMB: 512}},
		{in: "base", bad: true},
		{in: "=3", bad: true},
		{in: "base=-1", bad: true},
		{in: "base=x", bad: true},
		{in: "base=1,runtime=runsc", bad: true},
		{in: "base=1,memory=8", bad: true},
		{in: "base=1,user=", bad: true},
	} {
		got, err := ParseWarmPool(tc.in)
		if tc.bad != (err != nil) || (!tc.bad && got != tc.want) {
			t.Errorf("ParseWarmPool(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

func TestResolvePoolBoundAndTemplates(t *testing.T) {
	cfg := Config{Templates: map[string]string{"base": "sandpit/base:test"}, WarmPoolMax: 10,
		WarmPool: []service.PoolSpec{{Image: "base", Size: 4}, {Image: "other", Size: 6, User: "user"}}}
	got, err := resolvePool(cfg)
	if err != nil || len(got) != 2 || got[0].Image != "sandpit/base:test" {
		t.Fatalf("resolvePool = %+v, %v", got, err)
	}
	cfg.WarmPool[1].Size = 7
	if _, err := resolvePool(cfg); err == nil {
		t.Fatal("a pool above --warm-pool-max was accepted")
	}
	cfg.WarmPool = []service.PoolSpec{{Image: "base", Size: 1}, {Image: "sandpit/base:test", Size: 1}}
	if _, err := resolvePool(cfg); err == nil {
		t.Fatal("the same pool given twice was accepted")
	}
}
