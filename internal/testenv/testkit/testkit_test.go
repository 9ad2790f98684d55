package testkit_test

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
)

// TestEventuallyReturnsOnceTheCheckHolds: the check fails twice, then holds,
// and Eventually returns without failing the test.
func TestEventuallyReturnsOnceTheCheckHolds(t *testing.T) {
	calls := 0
	testkit.Eventually(t, 10*time.Second, "the third call", func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("check called %d times, want 3", calls)
	}
}

// TestFreePortCanBeBound: the port is free, so a listener takes it.
func TestFreePortCanBeBound(t *testing.T) {
	p := testkit.FreePort(t)
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Fatalf("listen on the free port %d: %v", p, err)
	}
	ln.Close()
}
