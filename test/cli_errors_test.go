package sandpit_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"testing"
)

// TestCLIDaemonDown checks that every client command, when no daemon
// listens, says so with one prefix and a hint, and exits 125.
func TestCLIDaemonDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	want := "sandpit: cannot reach the daemon at " + addr + ": is 'sandpit serve' running? (connect: connection refused)\n"
	for _, args := range [][]string{{"ls"}, {"create", "--name", "demo"}, {"exec", "demo", "--", "true"}, {"rm", "demo"}} {
		t.Run(args[0], func(t *testing.T) {
			cmd := exec.CommandContext(context.Background(), sandpitBin, args...)
			cmd.Env = append(os.Environ(), "SANDPIT_ADDR="+addr, "SANDPIT_TOKEN=unused")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 125 {
				t.Fatalf("sandpit %v: err %v, want exit code 125; stderr %q", args, err, stderr.String())
			}
			if stderr.String() != want {
				t.Fatalf("sandpit %v: stderr %q, want %q", args, stderr.String(), want)
			}
		})
	}
}
