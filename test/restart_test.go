package sandpit_test

import (
	"context"
	"database/sql"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// setRowState edits a stopped daemon's store directly: it stands for a
// daemon that recorded a state and crashed before the engine caught up.
func setRowState(t *testing.T, d *harness.Daemon, id, state string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(d.DataDir, "sandpit.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE sandboxes SET state = ? WHERE id = ?`, state, id); err != nil {
		t.Fatal(err)
	}
}

func docker(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %v: %v: %s", args, err, out)
	}
}

func wantState(t *testing.T, ctx context.Context, c *client.Client, id, state, reason string) {
	t.Helper()
	var sb client.Sandbox
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if sb, err = c.Get(ctx, id); err == nil && sb.State == state && sb.StateReason == reason {
			return
		}
	}
	t.Fatalf("sandbox %s is %s (reason %q, err %v), want %s (reason %q)", id, sb.State, sb.StateReason, err, state, reason)
}

// TestRestartScenarios crashes the daemon, changes the engine behind its
// back, restarts it and checks what reconcile made of each case.
func TestRestartScenarios(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()

	pausedExited := newSandbox(t, ctx, c)
	runningPaused := newSandbox(t, ctx, c)
	runningExited := newSandbox(t, ctx, c)
	for _, id := range []string{pausedExited, runningPaused, runningExited} {
		mustExpose(t, ctx, d, id, 3000, "http", http.StatusCreated)
		mustExpose(t, ctx, d, id, 3001, "tcp", http.StatusCreated)
	}
	d.Kill()
	setRowState(t, d, pausedExited, "paused")
	docker(t, "kill", "sandpit-"+pausedExited)
	docker(t, "pause", "sandpit-"+runningPaused)
	docker(t, "kill", "sandpit-"+runningExited)
	d.Restart(nil)

	// A paused row over an exited container is what an engine restart
	// leaves of a memory pause: the sandbox stays paused, as a
	// filesystem pause that says its memory was lost.
	wantState(t, ctx, c, pausedExited, "paused", "memory lost: the engine restarted")
	wantState(t, ctx, c, runningPaused, "paused", "")
	wantState(t, ctx, c, runningExited, "running", "")
	d.CheckConsistent(t)
	// The degraded pause resumes (a cold start) with all its routes.
	if _, err := c.Start(ctx, pausedExited); err != nil {
		t.Fatal(err)
	}
	wantState(t, ctx, c, pausedExited, "running", "")
	d.CheckConsistent(t)
}

// TestRestartManyCrashed: many sandboxes whose containers died with the
// daemon. The restarted daemon must answer /health at once and bring all of
// them back in the background, in parallel.
func TestRestartManyCrashed(t *testing.T) {
	n := 50
	if v, err := strconv.Atoi(os.Getenv("SANDPIT_RESTART_N")); err == nil && v > 0 {
		n = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sb, err := c.Create(ctx, client.CreateRequest{})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = sb.ID
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	d.Kill()
	args := []string{"kill"}
	for _, id := range ids {
		args = append(args, "sandpit-"+id)
	}
	docker(t, args...)

	began := time.Now()
	d.Restart(nil) // returns once /health answers
	// How soon /health answers is a benchmark's business
	// (BenchmarkRestartHealth), not a test's: on a loaded machine the
	// engine alone can take seconds. This test checks that the daemon serves
	// and that every crashed sandbox comes back.
	health := time.Since(began)
	const bound = 2 * time.Minute
	for {
		running := 0
		for _, id := range ids {
			if sb, err := c.Get(ctx, id); err == nil && sb.State == "running" {
				running++
			}
		}
		if running == n {
			break
		}
		if time.Since(began) > bound {
			t.Fatalf("%d of %d sandboxes back after %s", running, n, bound)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("%d crashed sandboxes: /health after %s, all running after %s", n, health.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	d.CheckConsistent(t)
}

// TestCallsBeforeReconcileChecks: after a restart the daemon serves before
// reconcile has checked each sandbox against the engine. Here the engine's
// container listing, which the background checks start from, hangs, so no
// sandbox is checked in the background while the calls below run; each call
// that needs a sandbox must check it first, and no answer may contradict
// what the engine holds.
func TestCallsBeforeReconcileChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	proxy := harness.NewEngineProxy(t)
	d := harness.Start(t, sandpitBin, harness.Options{
		Env:  []string{"DOCKER_HOST=" + proxy.Host},
		Args: []string{"--engine-timeout", "4m"},
	})
	c := d.Client()
	live := newSandbox(t, ctx, c)
	gone := newSandbox(t, ctx, c)
	exited := newSandbox(t, ctx, c)
	stopped := newSandbox(t, ctx, c)
	if _, err := c.Stop(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	docker(t, "rm", "-f", "sandpit-"+gone)
	docker(t, "kill", "sandpit-"+exited)

	proxy.Hold("/containers/json")
	d.Restart(nil) // returns once /health answers
	exec := func(id string) error {
		res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "true"})
		if err == nil && res.ExitCode != 0 {
			t.Fatalf("exec in %s: exit %d", id, res.ExitCode)
		}
		return err
	}

	// The daemon's background loops make their first round at start (the
	// metrics history samples every running sandbox then); none may check
	// a sandbox on its own while the listing is held. The pause gives them
	// that round before the list below looks; it bounds nothing.
	time.Sleep(500 * time.Millisecond)
	// Not checked yet, a running row is listed as starting, whatever its
	// container.
	page, _, err := c.List(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, sb := range page {
		listed[sb.ID] = sb.State
	}
	for id, want := range map[string]string{live: "starting", gone: "starting", exited: "starting", stopped: "stopped"} {
		if listed[id] != want {
			t.Fatalf("%s listed before its check as %q, want %s", id, listed[id], want)
		}
	}
	// An exec checks its sandbox first: the live one answers and is
	// running from then on. A get checks it too: the one whose container
	// is gone is the error it is, and not running.
	if err := exec(live); err != nil {
		t.Fatalf("exec in a live sandbox before its check: %v", err)
	}
	if sb, err := c.Get(ctx, live); err != nil || sb.State != "running" {
		t.Fatalf("live sandbox after an exec: %v %v, want running", sb.State, err)
	}
	if sb, err := c.Get(ctx, gone); err != nil || sb.State != "error" || sb.StateReason != "removed" {
		t.Fatalf("sandbox whose container is gone: %v %q %v, want error (removed)", sb.State, sb.StateReason, err)
	}
	if err := exec(gone); !isStatus(err, http.StatusConflict) {
		t.Fatalf("exec in a sandbox whose container is gone: %v, want 409", err)
	}
	// The exited one is brought back (its exec may come before or after
	// that) and then serves.
	_ = exec(exited)
	wantState(t, ctx, c, exited, "running", "")
	if err := exec(exited); err != nil {
		t.Fatalf("exec in a restarted sandbox: %v", err)
	}
	// A stopped sandbox starts as usual; a new sandbox is made as usual.
	if _, err := c.Start(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	if err := exec(stopped); err != nil {
		t.Fatalf("exec in a started sandbox: %v", err)
	}
	if err := exec(newSandbox(t, ctx, c)); err != nil {
		t.Fatalf("exec in a sandbox made before the checks ended: %v", err)
	}
	// The listing answers; the checks run and find nothing left to do.
	proxy.Release()
	d.CheckConsistent(t)
	for id, want := range map[string]string{live: "running", gone: "error", exited: "running", stopped: "running"} {
		if sb, err := c.Get(ctx, id); err != nil || sb.State != want {
			t.Fatalf("%s after the checks: %v %v, want %s", id, sb.State, err, want)
		}
	}
}
