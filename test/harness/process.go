package harness

import (
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// awaitHTTP polls url until it answers 200. It fails the test when the
// process ends first (done closes) or the budget runs out, with its logs.
func awaitHTTP(t testing.TB, url string, done <-chan struct{}, budget time.Duration, what string, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(budget)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			t.Fatalf("%s exited during start:\n%s", what, logs())
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not answer %s:\n%s", what, url, logs())
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
