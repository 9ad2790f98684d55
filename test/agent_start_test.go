package sandpit_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestDynamicAgentRefused: a plain `go build ./cmd/sandpit` on a machine
// with gcc links with cgo, so the executable the daemon would mount as the
// agent is dynamically linked and cannot start in a busybox sandbox. The
// daemon refuses to serve with it, saying how to build it instead.
func TestDynamicAgentRefused(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		if testenv.InCI() {
			t.Fatal("no gcc: .ci/run installs it")
		}
		t.Skip("no gcc: a cgo build is not possible here")
	}
	t.Parallel()
	ctx := ctxFor(t, 5*time.Minute)
	dir := t.TempDir()
	bin := filepath.Join(dir, "sandpit")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sandpit")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	serve := exec.CommandContext(ctx, bin, "serve", "--data-dir", filepath.Join(dir, "data"),
		"--listen", "127.0.0.1:0", "--proxy-listen", "127.0.0.1:0", "--network-name", "sandpit-test-never-made")
	var stderr bytes.Buffer
	serve.Stderr = &stderr
	err := serve.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("serve with a dynamic agent: %v, want it to exit with an error; log:\n%s", err, stderr.String())
	}
	for _, want := range []string{"dynamically linked", "scripts/build.sh", "CGO_ENABLED=0"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("serve's refusal lacks %q:\n%s", want, stderr.String())
		}
	}
}

// failingAgent is an agent that cannot start: it says why on stderr and
// exits, as an agent the kernel cannot load or one missing what it needs
// does. The create must answer with those words.
const failingAgent = `package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "agent: cannot start: the fault TestAgentCannotStart injects")
	os.Exit(3)
}
`

// TestAgentCannotStart: a sandbox whose agent exits at start fails its
// create with the agent's own words and exit code, not "container has no
// address", and leaves nothing behind.
func TestAgentCannotStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "agent", "main.go")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte(failingAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := harness.BuildWithAgent(dir, src)
	if err != nil {
		t.Fatal(err)
	}
	d := harness.Start(t, bin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	// One attempt: the client would retry a 502, and each attempt fails
	// the same way.
	c := client.New(d.Addr, d.Token, client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	start := time.Now()
	_, err = c.Create(ctx, client.CreateRequest{Name: "doomed"})
	// A generous bound: it shows the create fails when the agent exits,
	// not after the agent's whole health timeout (30 s).
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the create took %s to fail", took)
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("create with an agent that cannot start: %v, want an API error", err)
	}
	if ce.Status != http.StatusBadGateway || ce.Code != apitypes.CodeUpstream ||
		!strings.Contains(ce.Message, "the fault TestAgentCannotStart injects") || !strings.Contains(ce.Message, "code 3") ||
		strings.Contains(ce.Message, "no address") {
		t.Fatalf("create: %d %s %q; want 502 with the agent's own words and exit code", ce.Status, ce.Code, ce.Message)
	}
	list, _, err := d.Client().List(context.WithoutCancel(ctx), client.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Fatalf("a failed create left sandboxes: %+v %v", list, err)
	}
}
