package sandpit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// checkpointRuntime is the runtime scripts/ensure-runsc-checkpoint.sh
// registers: a runsc that can checkpoint Sandpit's sandboxes.
const checkpointRuntime = "runsc-ckpt"

// startCounter runs a shell loop that holds a counter in a shell variable
// only, and writes it to /tmp/count on every tick so the test can read it.
// A sandbox booted anew would have no such loop (the file would stand
// still), and one whose loop started again would count from 1.
func startCounter(t *testing.T, ctx context.Context, c *client.Client, id string) {
	t.Helper()
	sh(t, ctx, c, id, "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 &")
}

// readCount reads the counter, retrying while the file is being written
// (it is empty for a moment on every tick).
func readCount(t *testing.T, ctx context.Context, c *client.Client, id string) int {
	t.Helper()
	var n int
	testkit.Eventually(t, 30*time.Second, "the counter of "+id, func() error {
		res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "cat", Args: []string{"/tmp/count"}, TimeoutS: 30})
		if err != nil {
			return err
		}
		n, err = strconv.Atoi(strings.TrimSpace(res.Stdout))
		return err
	})
	return n
}

// countPast waits until the counter is past n.
func countPast(t *testing.T, ctx context.Context, c *client.Client, id string, n int) int {
	t.Helper()
	var got int
	testkit.Eventually(t, 60*time.Second, fmt.Sprintf("the counter of %s past %d", id, n), func() error {
		if got = readCount(t, ctx, c, id); got <= n {
			return fmt.Errorf("counter at %d", got)
		}
		return nil
	})
	return got
}

// TestCheckpointPause: under the runsc-ckpt runtime a memory pause writes
// the sandbox's processes into the data directory and stops its container;
// the pause outlives a SIGKILL of the daemon; the resume restores the
// processes, so a counter held only in memory goes on from where it was and
// a server answers again through its preview URL; files are kept across
// both kinds of pause; a delete removes the checkpoint. GET /v1/status says that this runtime checkpoints, and that
// runc freezes.
func TestCheckpointPause(t *testing.T) {
	harness.RequireRuntime(t, checkpointRuntime)
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--oci-runtime", checkpointRuntime}})
	c := d.Client()
	ctx := ctxFor(t, 5*time.Minute)

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pause.Runtime != checkpointRuntime || st.Pause.Memory != "checkpoint" {
		t.Fatalf("status pause %+v, want %s checkpoint", st.Pause, checkpointRuntime)
	}

	id := newSandbox(t, ctx, c)
	sh(t, ctx, c, id, "echo kept > /root/kept")
	startCounter(t, ctx, c, id)
	startHTTPD(t, ctx, c, id, 8080, "restored")
	p, err := c.ExposePort(ctx, id, 8080, "http")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the preview before the pause", func() error {
		return servesPage(ctx, d, p.PublicURL, "restored")
	})
	before := countPast(t, ctx, c, id, 20)

	sb, err := c.Pause(ctx, id, "memory")
	if err != nil || sb.State != "paused" || sb.PauseMode != "memory" {
		t.Fatalf("pause: %+v %v", sb, err)
	}
	if st := engineState(t, id); st != "exited" {
		t.Fatalf("container of a checkpointed pause is %s, want exited", st)
	}
	ckpt := filepath.Join(d.DataDir, "checkpoints", id)
	if fi, err := os.Stat(ckpt); err != nil || !fi.IsDir() {
		t.Fatalf("checkpoint %s: %v", ckpt, err)
	}
	if status, _, err := proxyGet(ctx, d, p.PublicURL); err == nil && status == http.StatusOK {
		t.Fatal("the preview answered while the sandbox was paused")
	}

	d.Kill()
	d.Restart(nil)
	wantPaused(t, ctx, c, id, "memory", "")
	if st := engineState(t, id); st != "exited" {
		t.Fatalf("container after the daemon's restart is %s, want exited", st)
	}
	d.CheckConsistent(t)

	sb, err = c.Resume(ctx, id)
	if err != nil || sb.State != "running" {
		t.Fatalf("resume: %+v %v", sb, err)
	}
	// The routes are back when the resume answers: no wait.
	if err := servesPage(ctx, d, p.PublicURL, "restored"); err != nil {
		t.Fatalf("preview right after the resume: %v", err)
	}
	if after := readCount(t, ctx, c, id); after < before {
		t.Fatalf("counter %d after the resume, %d before the pause: the processes were not restored", after, before)
	}
	countPast(t, ctx, c, id, before+10)
	if got := readFileIn(t, ctx, c, id, "/root/kept"); got != "kept\n" {
		t.Fatalf("file after the resume: %q", got)
	}
	if _, err := os.Stat(ckpt); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint after the resume: %v, want it gone", err)
	}

	// A filesystem pause under this runtime keeps the files too: the
	// runtime writes them to the container's layer on the host, not to a
	// store of gVisor's own that a new sandbox does not read.
	if _, err := c.Pause(ctx, id, "filesystem"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := readFileIn(t, ctx, c, id, "/root/kept"); got != "kept\n" {
		t.Fatalf("file after a filesystem pause: %q", got)
	}

	// A second checkpoint, removed by the delete.
	if _, err := c.Pause(ctx, id, "memory"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ckpt); err != nil {
		t.Fatalf("second checkpoint: %v", err)
	}
	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ckpt); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint after the delete: %v, want it gone", err)
	}
	d.CheckConsistent(t)
}

// TestPauseKindInStatus: under runc GET /v1/status says a memory pause
// freezes, and why it cannot checkpoint.
func TestPauseKindInStatus(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	st, err := d.Client().Status(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if st.Pause.Memory != "freezer" || st.Pause.Why == "" {
		t.Fatalf("status pause under runc %+v, want freezer with a reason", st.Pause)
	}
}

// TestCheckpointCrashPoints kills the daemon at each step of a checkpointed
// pause and of its resume. After the restart the sandbox is running or
// paused, never lost: a checkpoint not yet complete is dropped and the
// sandbox runs again (booted anew, with its files); a complete one is kept
// as a memory pause whose resume restores the processes; a restore whose
// row was not written yet is recorded as resumed. A retry with the same key
// finishes the call.
func TestCheckpointCrashPoints(t *testing.T) {
	harness.RequireRuntime(t, checkpointRuntime)
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--oci-runtime", checkpointRuntime}})
	c := d.Client()
	ctx := ctxFor(t, 6*time.Minute)
	id := newSandbox(t, ctx, c)
	sh(t, ctx, c, id, "echo kept > /root/kept")
	ckpt := filepath.Join(d.DataDir, "checkpoints", id)
	crashAt := func(point, path, key string) {
		t.Helper()
		d.Stop()
		d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=" + point})
		a, err := keyed(ctx, d, http.MethodPost, "/v1/sandboxes/"+id+path, `{"mode":"memory"}`, key)
		if !d.Wait(60 * time.Second) {
			t.Fatalf("daemon did not exit at %s: answered %d %s %v", point, a.Status, a.Body, err)
		}
		d.Restart(nil)
	}
	consistent := func() {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, "consistent", func() error {
			if v, err := d.Inconsistencies(ctx); err != nil || len(v) > 0 {
				return fmt.Errorf("%v %v", v, err)
			}
			return nil
		})
	}

	// The checkpoint is written but not complete: it goes, and the
	// sandbox runs again.
	crashAt("after-checkpoint-write", "/pause", "pause-1")
	wantState(t, ctx, c, id, "running", "")
	consistent()
	for _, p := range []string{ckpt, ckpt + ".partial"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after the restart: %v, want it gone", p, err)
		}
	}
	if got := readFileIn(t, ctx, c, id, "/root/kept"); got != "kept\n" {
		t.Fatalf("file after the interrupted checkpoint: %q", got)
	}

	// The checkpoint is complete, the row still says running: the
	// restart records the memory pause, and the resume restores it.
	startCounter(t, ctx, c, id)
	before := countPast(t, ctx, c, id, 20)
	crashAt("after-checkpoint", "/pause", "pause-2")
	wantPaused(t, ctx, c, id, "memory", "")
	consistent()
	if a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/pause", `{"mode":"memory"}`, "pause-2"); a.Status != http.StatusOK {
		t.Fatalf("retried pause: %d %s", a.Status, a.Body)
	}

	// The restore ran, the row still says paused: the restart records
	// the resume, and the processes go on.
	crashAt("after-resume-start", "/resume", "resume-1")
	wantState(t, ctx, c, id, "running", "")
	consistent()
	if a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/resume", `{"mode":"memory"}`, "resume-1"); a.Status != http.StatusOK {
		t.Fatalf("retried resume: %d %s", a.Status, a.Body)
	}
	if after := readCount(t, ctx, c, id); after < before {
		t.Fatalf("counter %d after the interrupted resume, %d before: the processes were not restored", after, before)
	}
	countPast(t, ctx, c, id, before+10)
	if _, err := os.Stat(ckpt); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint after the resume: %v, want it gone", err)
	}
	d.CheckConsistent(t)
}

// TestCheckpointAutoPauseAndWake: under runsc-ckpt the sweeper's pause at
// the deadline (on_timeout pause, keep_memory, as E2B's default) is a
// checkpoint, and a request to the sandbox's preview URL (auto_resume)
// restores it and is answered by the server that was running.
func TestCheckpointAutoPauseAndWake(t *testing.T) {
	harness.RequireRuntime(t, checkpointRuntime)
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--oci-runtime", checkpointRuntime}})
	c := d.Client()
	ctx := ctxFor(t, 4*time.Minute)
	sb, err := c.Create(ctx, client.CreateRequest{TimeoutS: 10, Lifecycle: &client.Lifecycle{OnTimeout: "pause", KeepMemory: true, AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	startHTTPD(t, ctx, c, sb.ID, 8080, "woken")
	p, err := c.ExposePort(ctx, sb.ID, 8080, "http")
	if err != nil {
		t.Fatal(err)
	}
	wantPaused(t, ctx, c, sb.ID, "memory", "timeout")
	if _, err := os.Stat(filepath.Join(d.DataDir, "checkpoints", sb.ID)); err != nil {
		t.Fatalf("checkpoint of the auto-pause: %v", err)
	}
	if st := engineState(t, sb.ID); st != "exited" {
		t.Fatalf("container of the auto-paused sandbox is %s, want exited", st)
	}
	// The first request wakes it: the httpd that was running answers.
	if err := servesPage(ctx, d, p.PublicURL, "woken"); err != nil {
		t.Fatalf("preview of the auto-paused sandbox: %v", err)
	}
	wantState(t, ctx, c, sb.ID, "running", "")
	d.CheckConsistent(t)
}
