package harness

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SDKDir is test/<sub> (test/e2b, test/daytona) with the npm package module
// installed, where the official SDKs' scripts run. Without node or the
// package the test is skipped, except in CI, where scripts/test.sh installs
// them first and their absence fails it.
func SDKDir(t testing.TB, sub, module string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "test", sub)
	missing := func(err error) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v (scripts/test.sh installs node and the SDKs before the Go tests)", sub, err)
		}
		t.Skipf("%s: %v; run npm ci in test/%s", sub, err, sub)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", filepath.FromSlash(module))); err != nil {
		missing(err)
	}
	return dir
}

// RunSDK runs the node script in dir (from SDKDir) with env added to this
// process's environment and decodes the JSON line it prints last, the
// script's answer, into out. The caller's own SDK settings (E2B_*,
// DAYTONA_*) and any variable env sets are left out of what the script
// inherits, so that it talks to the test's daemon and nothing else.
func RunSDK(t testing.TB, ctx context.Context, dir, script string, env []string, out any) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	set := map[string]bool{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		set[name] = true
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "E2B_") && !strings.HasPrefix(name, "DAYTONA_") && !set[name] {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", script, err, b, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), out); err != nil {
		t.Fatalf("%s printed %q: %v", script, b, err)
	}
}
