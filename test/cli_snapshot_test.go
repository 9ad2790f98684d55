package sandpit_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestCLISnapshotFork: `sandpit snapshot create` snapshots a sandbox,
// `snapshot ls` lists it (filtered by sandbox), `create --template` makes a
// sandbox of it, `snapshot rm` is refused while that sandbox exists and
// works once it is gone; `sandpit fork --count 2` prints two copies that
// have the parent's file.
func TestCLISnapshotFork(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	c := d.Client()
	src, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, c, src.ID, "/root/cli.txt", "cli")

	out, errOut, code := runCLI(t, ctx, d, nil, "snapshot", "create", "--name", "cli-snap", src.ID)
	if code != 0 {
		t.Fatalf("snapshot create: %d %s", code, errOut)
	}
	snapID := strings.TrimSpace(out)
	out, _, code = runCLI(t, ctx, d, nil, "snapshot", "ls", "--sandbox", src.ID)
	if code != 0 || !strings.Contains(out, "cli-snap") || !strings.Contains(out, snapID) {
		t.Fatalf("snapshot ls: %d %s", code, out)
	}
	out, _, code = runCLI(t, ctx, d, nil, "-o", "json", "snapshot", "ls", "--sandbox", "sbother")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("snapshot ls of another sandbox: %d %q", code, out)
	}
	out, errOut, code = runCLI(t, ctx, d, nil, "create", "--template", "cli-snap")
	if code != 0 {
		t.Fatalf("create from the snapshot: %d %s", code, errOut)
	}
	copyID := strings.Fields(out)[0]
	if got := catFile(t, ctx, c, copyID, "/root/cli.txt"); got != "cli" {
		t.Fatalf("the copy reads %q", got)
	}
	if _, errOut, code = runCLI(t, ctx, d, nil, "snapshot", "rm", "cli-snap"); code == 0 || !strings.Contains(errOut, "runs from") {
		t.Fatalf("snapshot rm while in use: %d %s", code, errOut)
	}
	if err := c.Delete(ctx, copyID); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code = runCLI(t, ctx, d, nil, "snapshot", "rm", "cli-snap"); code != 0 {
		t.Fatalf("snapshot rm: %d %s", code, errOut)
	}

	out, errOut, code = runCLI(t, ctx, d, nil, "-o", "json", "fork", "--count", "2", src.ID)
	if code != 0 {
		t.Fatalf("fork: %d %s", code, errOut)
	}
	var forks []client.ForkResult
	if err := json.Unmarshal([]byte(out), &forks); err != nil || len(forks) != 2 {
		t.Fatalf("fork output %q: %v", out, err)
	}
	for _, f := range forks {
		if f.Sandbox == nil {
			t.Fatalf("a copy failed: %+v", f.Error)
		}
		if got := catFile(t, ctx, c, f.Sandbox.ID, "/root/cli.txt"); got != "cli" {
			t.Fatalf("fork %s reads %q", f.Sandbox.ID, got)
		}
	}
	if _, errOut, code = runCLI(t, ctx, d, nil, "fork", "--count", "0", src.ID); code == 0 || !strings.Contains(errOut, "count") {
		t.Fatalf("fork --count 0: %d %s", code, errOut)
	}
}
