package harness

import (
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// awaitHTTP polls url until it answers 200. It fails the test when the
// process exits first (done closes) or the budget runs out.
func awaitHTTP(t testing.TB, url string, done <-chan struct{}, budget time.Duration, what string, logs func() string) {
	t.Helper()
	if err := waitHTTP(url, done, budget); err != nil {
		t.Fatalf("%s %v:\n%s", what, err, logs())
	}
}

// errExited marks a process that exited before it answered.
var errExited = errors.New("exited during start")

// waitHTTP polls url until it answers 200, the process exits (done closes:
// errExited) or the budget runs out.
func waitHTTP(url string, done <-chan struct{}, budget time.Duration) error {
	deadline := time.Now().Add(budget)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errExited
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		// A refused connection costs next to nothing; a short wait lets
		// Daemon.StartedIn measure a start to a few milliseconds.
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("did not answer %s", url)
}

// stopProcess sends sig to a process this test started and waits for it to
// end (done closes), killing it after grace.
func stopProcess(cmd *exec.Cmd, done <-chan struct{}, sig syscall.Signal, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}
