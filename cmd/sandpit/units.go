package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// memoryFlag is a --memory flag held in MiB. It takes a plain number as MiB
// (what the API counts in) and docker's units as docker does: 512m, 4g,
// 1.5g, 2048k, 1t, with an optional b ("512mb") and either case. A size
// that is not a whole number of MiB is rounded up to the next one.
type memoryFlag int64

func (m *memoryFlag) String() string { return strconv.FormatInt(int64(*m), 10) }

func (m *memoryFlag) Type() string { return "size" }

func (m *memoryFlag) Set(s string) error {
	mib, err := parseMemoryMiB(s)
	if err != nil {
		return err
	}
	*m = memoryFlag(mib)
	return nil
}

// parseMemoryMiB reads a memory size into MiB.
func parseMemoryMiB(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "ib")
	t = strings.TrimSuffix(t, "b")
	perMiB := 1.0 // how many of the unit make one MiB, inverted below
	switch {
	case strings.HasSuffix(t, "k"):
		perMiB, t = 1.0/1024, strings.TrimSuffix(t, "k")
	case strings.HasSuffix(t, "m"):
		t = strings.TrimSuffix(t, "m")
	case strings.HasSuffix(t, "g"):
		perMiB, t = 1024, strings.TrimSuffix(t, "g")
	case strings.HasSuffix(t, "t"):
		perMiB, t = 1024*1024, strings.TrimSuffix(t, "t")
	case strings.ToLower(strings.TrimSpace(s)) != t:
		// A bare "b" suffix: bytes, as docker reads "536870912b".
		perMiB = 1.0 / (1 << 20)
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("invalid size %q: want MiB (512) or a size with docker's units (512m, 4g)", s)
	}
	return int64(math.Ceil(v * perMiB)), nil
}
