package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/cluster"
)

func TestFallbackOnlyWhenNothingReachedTheOwner(t *testing.T) {
	dead := fmt.Errorf("node n2 %w", cluster.ErrNodeDown)
	for _, tc := range []struct {
		name      string
		err       error
		connected bool
		want      bool
	}{
		{"the dial failed", fmt.Errorf("%w: n2: refused", cluster.ErrDial), false, true},
		{"dead before a connection was made", dead, false, true},
		{"dead after the request went out", dead, true, false},
		{"the owner answered badly", errors.New("unexpected EOF"), true, false},
		{"the client went away", context.Canceled, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := &fallback{}
			fb.connected.Store(tc.connected)
			if got := fb.applies(tc.err); got != tc.want {
				t.Fatalf("applies(%v) with connected=%v = %v, want %v", tc.err, tc.connected, got, tc.want)
			}
		})
	}
}
