package sandpit_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
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

// TestCLIMemoryMessages checks that a memory below the floor and a negative
// one get the same message naming both bounds, and no sandbox.
func TestCLIMemoryMessages(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, time.Minute)
	for _, mem := range []string{"-5", "4"} {
		t.Run(mem, func(t *testing.T) {
			_, errOut, code := runCLI(t, ctx, d, nil, "create", "--memory", mem)
			if code != 1 || !strings.Contains(errOut, "memory must be 0 (no limit) or between 16 and ") || !strings.HasSuffix(errOut, "MiB, got "+mem+"\n") && !strings.HasSuffix(errOut, "all the host has), got "+mem+"\n") {
				t.Fatalf("create --memory %s: exit %d, stderr %q", mem, code, errOut)
			}
			if strings.Count(errOut, "sandpit:") != 1 {
				t.Fatalf("create --memory %s: stderr %q has not exactly one prefix", mem, errOut)
			}
		})
	}
	out, errOut, code := runCLI(t, ctx, d, nil, "-o", "json", "ls")
	if code != 0 {
		t.Fatalf("ls exited %d: %s", code, errOut)
	}
	if strings.TrimSpace(out) != "[]" {
		t.Fatalf("a refused create left sandboxes: %q", out)
	}
}
