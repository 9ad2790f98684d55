package sandpit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// engineRestartEnv enables the tests that restart the Docker engine. They
// stop every container on the machine, so they run alone: scripts/test.sh
// runs them after every other suite has ended.
const engineRestartEnv = "SANDPIT_ENGINE_RESTART_TEST"

// restartEngine stops dockerd (SIGTERM, as a service manager would), waits
// for it to exit, and starts it again with scripts/ensure-docker.sh.
func restartEngine(t *testing.T) {
	t.Helper()
	out, err := exec.Command("pidof", "dockerd").Output()
	if err != nil {
		t.Fatalf("pidof dockerd: %v", err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(out))[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop dockerd %d: %v", pid, err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("dockerd %d did not exit", pid)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cmd := exec.Command(filepath.Join("..", "scripts", "ensure-docker.sh"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start dockerd: %v %s", err, out)
	}
}

// TestEngineRestartKeepsState: what outlives a container outlives a SIGKILL
// of the daemon followed by a restart of the engine: a snapshot (created
// from afterwards), a filesystem-paused sandbox (resumed with its files), a
// memory-paused one (degraded to a filesystem pause that says so, resumed
// with its files), and a volume (its files read by a new sandbox).
func TestEngineRestartKeepsState(t *testing.T) {
	if os.Getenv(engineRestartEnv) == "" {
		t.Skipf("restarts the Docker engine; run alone with %s=1 (scripts/test.sh does)", engineRestartEnv)
	}
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 5*time.Minute)
	c := d.Client()

	src, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, c, src.ID, "/root/snap.txt", "snapshotted")
	snap, err := c.Snapshot(ctx, src.ID, client.SnapshotRequest{Name: "engine-restart"})
	if err != nil {
		t.Fatal(err)
	}
	fsPaused, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, c, fsPaused.ID, "/root/fs.txt", "paused on disk")
	if _, err := c.Pause(ctx, fsPaused.ID, "filesystem"); err != nil {
		t.Fatal(err)
	}
	memPaused, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, c, memPaused.ID, "/root/mem.txt", "paused in memory")
	if _, err := c.Pause(ctx, memPaused.ID, "memory"); err != nil {
		t.Fatal(err)
	}

	if _, err := c.CreateVolume(ctx, "engine-restart"); err != nil {
		t.Fatal(err)
	}
	writer, err := c.Create(ctx, client.CreateRequest{Volumes: []client.VolumeMount{{Volume: "engine-restart", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, c, writer.ID, "/data/v.txt", "on the volume")
	if err := c.Delete(ctx, writer.ID); err != nil {
		t.Fatal(err)
	}

	d.Kill()
	d.Wait(30 * time.Second)
	restartEngine(t)
	d.Restart(nil)
	c = d.Client()

	if got, err := c.ListSnapshots(ctx, "", "engine-restart"); err != nil || len(got) != 1 || got[0].ID != snap.ID {
		t.Fatalf("snapshots after the engine restart: %+v %v", got, err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Template: "engine-restart"})
	if err != nil {
		t.Fatal(err)
	}
	if got := catFile(t, ctx, c, sb.ID, "/root/snap.txt"); got != "snapshotted" {
		t.Fatalf("a sandbox from the snapshot after the engine restart reads %q", got)
	}

	reader, err := c.Create(ctx, client.CreateRequest{Volumes: []client.VolumeMount{{Volume: "engine-restart", Path: "/data", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := catFile(t, ctx, c, reader.ID, "/data/v.txt"); got != "on the volume" {
		t.Fatalf("the volume after the engine restart gives %q", got)
	}

	// The filesystem pause is kept as it was; the memory pause lost its
	// memory with the engine (no checkpoints here) and says so, its files
	// kept. Both resume with their files.
	for _, tc := range []struct {
		id, file, content, reason string
	}{
		{fsPaused.ID, "/root/fs.txt", "paused on disk", ""},
		{memPaused.ID, "/root/mem.txt", "paused in memory", "memory lost"},
	} {
		got, err := c.Get(ctx, tc.id)
		if err != nil || got.State != "paused" || got.PauseMode != "filesystem" || !strings.Contains(got.StateReason, tc.reason) {
			t.Fatalf("paused sandbox %s after the engine restart: %+v %v", tc.id, got, err)
		}
		if _, err := c.Resume(ctx, tc.id); err != nil {
			t.Fatalf("resume %s: %v", tc.id, err)
		}
		if got := catFile(t, ctx, c, tc.id, tc.file); got != tc.content {
			t.Fatalf("resumed %s reads %q", tc.id, got)
		}
	}
}
