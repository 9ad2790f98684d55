package sandpit_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestCLIOutputJSON: every client command prints one JSON document with
// --output json, and `sandpit ls --output json | jq` works.
func TestCLIOutputJSON(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)

	out, errOut, code := runCLI(t, ctx, d, nil, "create", "--output", "json", "--name", "json-box", "--label", "via=json")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	var sb struct{ ID, Name, State string }
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.Name != "json-box" || sb.State != "running" {
		t.Fatalf("create -o json = %q (%v)", out, err)
	}
	id := sb.ID

	// The acceptance pipe: ls through jq.
	if _, err := exec.LookPath("jq"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("jq missing in CI")
		}
		t.Log("jq not installed: skipping the pipe")
	} else {
		pipe := exec.CommandContext(ctx, "sh", "-c", `"$SANDPIT_BIN" ls --output json | jq -r '.[] | select(.labels.via == "json") | .id'`)
		pipe.Env = append(os.Environ(), "SANDPIT_BIN="+sandpitBin, "SANDPIT_ADDR="+d.Addr, "SANDPIT_TOKEN="+d.Token)
		got, err := pipe.CombinedOutput()
		if err != nil || strings.TrimSpace(string(got)) != id {
			t.Fatalf("ls --output json | jq = %q (%v), want %s", got, err, id)
		}
	}

	if _, errOut, code := runCLI(t, ctx, d, nil, "exec", id, "--", "sh", "-c", "mkdir -p /tmp/w && echo hi > /tmp/w/index.html && httpd -p 8080 -h /tmp/w"); code != 0 {
		t.Fatalf("exec: %s", errOut)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // a fragment of the JSON
		code int
	}{
		{"ls", []string{"ls"}, `"id": "` + id + `"`, 0},
		{"exec", []string{"exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3"}, `"exit_code": 3`, 3},
		{"expose", []string{"expose", id, "8080"}, `"public_url": "http://` + id + `-8080.`, 0},
		{"ports", []string{"ports", id}, `"port": 8080`, 0},
		{"unexpose", []string{"unexpose", id, "8080"}, `"exposed": false`, 0},
		{"domain ls", []string{"domain", "ls", id}, `[]`, 0},
		{"status", []string{"status"}, `"engine": {`, 0},
		{"version", []string{"version"}, `"version": "`, 0},
		{"token list", []string{"token", "list"}, `[]`, 0},
		{"owner limits", []string{"owner", "limits", "admin"}, `"owner": "admin"`, 0},
		{"audit", []string{"audit"}, `"action": "sandbox.create"`, 0},
		{"rm", []string{"rm", id, "sbnope"}, `"removed": true`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, ctx, d, nil, append([]string{"-o", "json"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, errOut)
			}
			if !json.Valid([]byte(out)) || !strings.Contains(out, tc.want) {
				t.Fatalf("output is not JSON containing %q:\n%s", tc.want, out)
			}
		})
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "-o", "yaml", "ls"); code == 0 || !strings.Contains(errOut, "want text or json") {
		t.Fatalf("-o yaml: %d %q, want a clear refusal", code, errOut)
	}
}

// TestCLIStatusText: sandpit status names the version, the engine, the store,
// the pool and the cluster.
func TestCLIStatusText(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, time.Minute)
	out, errOut, code := runCLI(t, ctx, d, nil, "status")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	for _, want := range []string{"version", "engine    docker ok", "store     " + d.DataDir, "pool      off", "cluster   single node"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// TestCLICompletion: the completion scripts of the three shells.
func TestCLICompletion(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, time.Minute)
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, err := exec.CommandContext(ctx, sandpitBin, "completion", shell).Output()
		if err != nil || !strings.Contains(string(out), "sandpit") || len(out) < 500 {
			t.Errorf("completion %s: %v, %d bytes", shell, err, len(out))
		}
	}
	if _, err := exec.CommandContext(ctx, "bash", "-n", "-c", "source <("+sandpitBin+" completion bash)").CombinedOutput(); err != nil {
		t.Errorf("bash completion does not parse: %v", err)
	}
}

// runInPTY runs the CLI with stdout and stderr on a pseudo-terminal, as in an
// interactive shell, and returns what the terminal showed.
func runInPTY(t *testing.T, ctx context.Context, d *harness.Daemon, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, sandpitBin, args...)
	cmd.Env = append(os.Environ(), "SANDPIT_ADDR="+d.Addr, "SANDPIT_TOKEN="+d.Token)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	_, _ = io.Copy(&buf, f) // ends with EIO once the child exits
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return buf.String(), code
}

// TestCLIProgress: a create shows a spinner with the elapsed time, and a
// 50 MB cp shows a progress bar both ways, on a terminal only; piped, the
// output is exactly what a script expects.
func TestCLIProgress(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)

	shown, code := runInPTY(t, ctx, d, "create")
	if code != 0 || !strings.Contains(shown, "creating sandbox") || !strings.Contains(shown, "s\r") && !strings.Contains(shown, "s\x1b") {
		t.Fatalf("create on a terminal (exit %d) showed %q, want a spinner with the elapsed time", code, shown)
	}
	lines := strings.Fields(strings.ReplaceAll(shown, "\x1b[K", " "))
	id := lines[len(lines)-1]
	if !strings.HasPrefix(id, "sb") {
		t.Fatalf("create on a terminal: last word %q is not an id (%q)", id, shown)
	}

	big := filepath.Join(t.TempDir(), "big.bin")
	data := make([]byte, 50<<20)
	_, _ = rand.Read(data)
	if err := os.WriteFile(big, data, 0o644); err != nil {
		t.Fatal(err)
	}
	shown, code = runInPTY(t, ctx, d, "cp", big, id+":/tmp/big.bin")
	if code != 0 || !strings.Contains(shown, "upload [") || !strings.Contains(shown, "%") || !strings.Contains(shown, "uploaded 50.0 MiB") {
		t.Fatalf("cp in on a terminal (exit %d) showed %q, want a progress bar", code, tail(shown))
	}
	back := filepath.Join(t.TempDir(), "back.bin")
	shown, code = runInPTY(t, ctx, d, "cp", id+":/tmp/big.bin", back)
	if code != 0 || !strings.Contains(shown, "download") || !strings.Contains(shown, "downloaded 50.0 MiB") {
		t.Fatalf("cp out on a terminal (exit %d) showed %q, want progress", code, tail(shown))
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("round trip through cp changed the file")
	}

	// Piped: no spinner, no bar, no carriage returns.
	out, errOut, code := runCLI(t, ctx, d, nil, "cp", big, id+":/tmp/big2.bin")
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("piped cp: exit %d, stdout %q, stderr %q; want silence", code, out, tail(errOut))
	}
	out, errOut, code = runCLI(t, ctx, d, nil, "create")
	if code != 0 || !strings.HasPrefix(out, "sb") || strings.Count(out, "\n") != 1 || errOut != "" {
		t.Fatalf("piped create: exit %d, stdout %q, stderr %q; want the id alone", code, out, errOut)
	}
}

func tail(s string) string {
	if len(s) > 400 {
		return "..." + s[len(s)-400:]
	}
	return s
}
