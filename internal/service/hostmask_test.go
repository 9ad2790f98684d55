package service_test

import (
	"errors"
	"testing"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// TestHostMask: a policy's MaskRequestHost survives normalisation, is
// refused when it is no host, and gives the Host header per port.
func TestHostMask(t *testing.T) {
	for _, tc := range []struct {
		mask, want string
		bad        bool
	}{
		{mask: "", want: ""},
		{mask: "app-${PORT}.internal", want: "app-${PORT}.internal"},
		{mask: " localhost:${PORT} ", want: "localhost:${PORT}"},
		{mask: "a b", bad: true},
		{mask: "evil/path", bad: true},
		{mask: "x\r\nInjected: 1", bad: true},
		{mask: "user@host", bad: true},
	} {
		p, err := service.NormalizeNetwork(sandpit.NetworkPolicy{MaskRequestHost: tc.mask})
		if tc.bad {
			if !errors.Is(err, sandpit.ErrInvalid) {
				t.Errorf("%q: err %v, want sandpit.ErrInvalid", tc.mask, err)
			}
			continue
		}
		if err != nil || p.MaskRequestHost != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.mask, p.MaskRequestHost, err, tc.want)
		}
	}
	p := sandpit.NetworkPolicy{MaskRequestHost: "app-${PORT}.internal"}
	if got := service.MaskHost(p, 8080); got != "app-8080.internal" {
		t.Fatalf("MaskHost = %q", got)
	}
	if got := service.MaskHost(sandpit.NetworkPolicy{}, 8080); got != "" {
		t.Fatalf("MaskHost without a mask = %q", got)
	}
}
