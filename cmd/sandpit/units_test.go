package main

import "testing"

func TestParseMemoryMiB(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"512", 512}, {"512m", 512}, {"512M", 512}, {"512mb", 512}, {"4g", 4096}, {"4G", 4096}, {"4GiB", 4096},
		{"1.5g", 1536}, {"2048k", 2}, {"1t", 1 << 20}, {"536870912b", 512}, {"100k", 1}, {"-5", -5},
	} {
		got, err := parseMemoryMiB(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseMemoryMiB(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "g", "4x", "four", "NaN", "Inf"} {
		if got, err := parseMemoryMiB(bad); err == nil {
			t.Errorf("parseMemoryMiB(%q) = %d, want an error", bad, got)
		}
	}
}
