package testkit_test

import (
	"errors"
	"fmt"
	"net"
	"runtime"
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

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does, so a failing Eventually can be
// watched without failing this test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestEventuallyFailsWithTheLastError: a check that never holds fails the
// test once the budget has passed, naming what was awaited and the check's
// last complaint.
func TestEventuallyFailsWithTheLastError(t *testing.T) {
	f := &fatalRecorder{TB: t}
	done := make(chan struct{})
	calls := 0
	go func() {
		defer close(done)
		testkit.Eventually(f, 300*time.Millisecond, "the impossible", func() error {
			calls++
			return fmt.Errorf("complaint %d", calls)
		})
	}()
	<-done
	if want := fmt.Sprintf("the impossible (after 300ms): complaint %d", calls); f.msg != want || calls < 2 {
		t.Fatalf("Eventually failed with %q after %d calls, want %q after at least 2", f.msg, calls, want)
	}
}
