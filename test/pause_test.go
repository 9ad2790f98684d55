package sandpit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// bootMarker is the start time of the sandbox's process 1 (field 22 of
// /proc/1/stat, in clock ticks since the host booted). It changes exactly
// when the container starts again: the host's boot id (shared by every
// container under runc) does not, and a frozen container keeps it.
func bootMarker(t *testing.T, ctx context.Context, c *client.Client, id string) string {
	t.Helper()
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "cut -d' ' -f22 /proc/1/stat"}, TimeoutS: 30})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("boot marker of %s: %v exit %d %q", id, err, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(res.Stdout)
}

func readFileIn(t *testing.T, ctx context.Context, c *client.Client, id, path string) string {
	t.Helper()
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "cat", Args: []string{path}, TimeoutS: 30})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("cat %s in %s: %v exit %d %q", path, id, err, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

// engineState is the container's state as docker reports it.
func engineState(t *testing.T, id string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Status}}", "sandpit-"+id).CombinedOutput()
	if err != nil {
		t.Fatalf("docker inspect %s: %v: %s", id, err, out)
	}
	return strings.TrimSpace(string(out))
}

func wantPaused(t *testing.T, ctx context.Context, c *client.Client, id, mode, reason string) client.Sandbox {
	t.Helper()
	var sb client.Sandbox
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if sb, err = c.Get(ctx, id); err == nil && sb.State == "paused" && sb.PauseMode == mode && sb.StateReason == reason {
			return sb
		}
	}
	t.Fatalf("sandbox %s is %s mode %q reason %q (err %v), want paused mode %q reason %q", id, sb.State, sb.PauseMode, sb.StateReason, err, mode, reason)
	return sb
}

// TestPauseFilesystem pauses a sandbox keeping only its filesystem: the
// container stops, the pause survives a SIGKILL of the daemon, and the
// resume boots the sandbox anew with its files.
func TestPauseFilesystem(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	id := newSandbox(t, ctx, c)
	sh(t, ctx, c, id, "echo kept > /root/kept")
	before := bootMarker(t, ctx, c, id)

	sb, err := c.Pause(ctx, id, "filesystem")
	if err != nil || sb.State != "paused" || sb.PauseMode != "filesystem" {
		t.Fatalf("pause: %+v %v", sb, err)
	}
	if st := engineState(t, id); st != "exited" {
		t.Fatalf("container of a filesystem pause is %s, want exited", st)
	}
	// A retried pause answers the paused sandbox.
	if again, err := c.Pause(ctx, id, "filesystem"); err != nil || again.State != "paused" {
		t.Fatalf("retried pause: %+v %v", again, err)
	}

	d.Kill()
	d.Restart(nil)
	wantPaused(t, ctx, c, id, "filesystem", "")
	d.CheckConsistent(t)

	sb, err = c.Resume(ctx, id)
	if err != nil || sb.State != "running" || sb.PauseMode != "" {
		t.Fatalf("resume: %+v %v", sb, err)
	}
	if got := readFileIn(t, ctx, c, id, "/root/kept"); got != "kept\n" {
		t.Fatalf("file after resume: %q", got)
	}
	if after := bootMarker(t, ctx, c, id); after == before {
		t.Fatalf("boot marker %s unchanged: the sandbox did not boot anew", after)
	}
	// Resuming a running sandbox is a no-op.
	if again, err := c.Resume(ctx, id); err != nil || again.State != "running" {
		t.Fatalf("resume of a running sandbox: %+v %v", again, err)
	}
	d.CheckConsistent(t)
}

// TestPauseMemoryRestarts: a memory pause outlives a SIGKILL of the daemon
// (the frozen container stays frozen, and its processes continue on
// resume); when the engine restarts, the frozen processes are gone and the
// sandbox is kept as a filesystem pause whose reason says so.
//
// Restarting the shared engine would take every other test's containers
// with it, so the engine restart is reproduced by what it leaves behind:
// the container, thawed and stopped while the daemon is down.
func TestPauseMemoryRestarts(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	id := newSandbox(t, ctx, c)
	sh(t, ctx, c, id, "echo kept > /root/kept; sleep 3600 >/dev/null 2>&1 & echo $! > /root/sleeper")
	before := bootMarker(t, ctx, c, id)

	if sb, err := c.Pause(ctx, id, ""); err != nil || sb.PauseMode != "memory" {
		t.Fatalf("pause: %+v %v", sb, err)
	}
	d.Kill()
	d.Restart(nil)
	wantPaused(t, ctx, c, id, "memory", "")
	if st := engineState(t, id); st != "paused" {
		t.Fatalf("container after the daemon's restart is %s, want paused", st)
	}
	d.CheckConsistent(t)
	if _, err := c.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if after := bootMarker(t, ctx, c, id); after != before {
		t.Fatalf("boot marker %s -> %s: a memory resume must not reboot", before, after)
	}
	sh(t, ctx, c, id, "kill -0 $(cat /root/sleeper)")

	// The engine restarts while the sandbox is memory-paused.
	if _, err := c.Pause(ctx, id, "memory"); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	docker(t, "unpause", "sandpit-"+id)
	docker(t, "stop", "-t", "0", "sandpit-"+id)
	d.Restart(nil)
	wantPaused(t, ctx, c, id, "filesystem", "memory lost: the engine restarted")
	d.CheckConsistent(t)
	if _, err := c.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := readFileIn(t, ctx, c, id, "/root/kept"); got != "kept\n" {
		t.Fatalf("file after the degraded resume: %q", got)
	}
	if after := bootMarker(t, ctx, c, id); after == before {
		t.Fatal("the degraded resume did not boot anew")
	}
}

// TestPausedDoNotCountAgainstMaxSandboxes: --max-sandboxes counts running
// (and stopped) sandboxes, not paused ones of either mode.
func TestPausedDoNotCountAgainstMaxSandboxes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--max-sandboxes", "2"}})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	a, b := newSandbox(t, ctx, c), newSandbox(t, ctx, c)
	full := func() {
		t.Helper()
		if status, code, _, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes", `{}`, nil); err != nil || status != http.StatusTooManyRequests {
			t.Fatalf("create at the cap: %d %s %v, want 429", status, code, err)
		}
	}
	full()
	if _, err := c.Pause(ctx, a, "memory"); err != nil {
		t.Fatal(err)
	}
	newSandbox(t, ctx, c)
	full()
	if _, err := c.Pause(ctx, b, "filesystem"); err != nil {
		t.Fatal(err)
	}
	newSandbox(t, ctx, c)
	full()
}

// TestAutoPauseAtDeadline: a sandbox made with on_timeout pause is paused
// at its deadline, in the mode keep_memory says, and kept for the paused
// retention; the kill default still kills.
func TestAutoPauseAtDeadline(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	fs, err := c.Create(ctx, client.CreateRequest{TimeoutS: 2, Lifecycle: &client.Lifecycle{OnTimeout: "pause"}})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := c.Create(ctx, client.CreateRequest{TimeoutS: 2, Lifecycle: &client.Lifecycle{OnTimeout: "pause", KeepMemory: true}})
	if err != nil {
		t.Fatal(err)
	}
	killed, err := c.Create(ctx, client.CreateRequest{TimeoutS: 2})
	if err != nil {
		t.Fatal(err)
	}
	sb := wantPaused(t, ctx, c, fs.ID, "filesystem", "timeout")
	// The retention is written just after the pause (so a crash between
	// the two leaves a sandbox the next sweep finishes): a read can fall
	// between them.
	testkit.Eventually(t, 30*time.Second, "the paused retention", func() error {
		var err error
		if sb, err = c.Get(ctx, fs.ID); err != nil {
			return err
		}
		if sb.EndAt == nil || time.Until(*sb.EndAt) < 29*24*time.Hour {
			return fmt.Errorf("paused sandbox's end_at %v, want the paused retention", sb.EndAt)
		}
		return nil
	})
	if sb.Lifecycle == nil || sb.Lifecycle.OnTimeout != "pause" {
		t.Fatalf("lifecycle %+v", sb.Lifecycle)
	}
	wantPaused(t, ctx, c, mem.ID, "memory", "timeout")
	testkit.Eventually(t, 30*time.Second, "killed at the deadline", func() error {
		if _, err := c.Get(ctx, killed.ID); !isNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
	// A paused-at-deadline sandbox resumes and runs again.
	if sb, err := c.Resume(ctx, fs.ID); err != nil || sb.State != "running" {
		t.Fatalf("resume: %+v %v", sb, err)
	}
	// Bad lifecycles are refused before anything is made.
	for _, body := range []string{`{"lifecycle":{"on_timeout":"sleep"}}`, `{"lifecycle":{"auto_resume":true}}`} {
		if status, _, _, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes", body, nil); err != nil || status != http.StatusBadRequest {
			t.Fatalf("create %s: %d %v, want 400", body, status, err)
		}
	}
	if status, _, _, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes/"+fs.ID+"/pause", `{"mode":"disk"}`, nil); err != nil || status != http.StatusBadRequest {
		t.Fatalf("pause mode disk: %d %v, want 400", status, err)
	}
}

func isNotFound(err error) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// TestAutoResumeThroughPreview: a request through the preview URL of a
// paused sandbox made with auto_resume waits while it resumes and is
// served; concurrent requests make one resume. Without auto_resume the
// request is answered as for any sandbox without routes, and the sandbox
// stays paused.
func TestAutoResumeThroughPreview(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	wake, err := c.Create(ctx, client.CreateRequest{Lifecycle: &client.Lifecycle{OnTimeout: "pause", KeepMemory: true, AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	sleepy := newSandbox(t, ctx, c)
	urls := map[string]string{}
	for _, id := range []string{wake.ID, sleepy} {
		startHTTPD(t, ctx, c, id, 8080, "page of "+id)
		urls[id] = mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated).PublicURL
		testkit.Eventually(t, 10*time.Second, "preview", func() error { return servesPage(ctx, d, urls[id], "page of "+id) })
		if _, err := c.Pause(ctx, id, "memory"); err != nil {
			t.Fatal(err)
		}
	}

	if status, _, err := proxyGet(ctx, d, urls[sleepy]); err != nil || status == http.StatusOK {
		t.Fatalf("preview of a paused sandbox without auto-resume: %d %v", status, err)
	}
	wantPaused(t, ctx, c, sleepy, "memory", "")

	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- servesPage(ctx, d, urls[wake.ID], "page of "+wake.ID)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if sb, err := c.Get(ctx, wake.ID); err != nil || sb.State != "running" {
		t.Fatalf("after the wake: %+v %v", sb, err)
	}
	if n := strings.Count(d.Logs(), "sandbox auto-resumed by traffic"); n != 1 {
		t.Fatalf("%d resumes for 10 concurrent requests, want 1", n)
	}
	d.CheckConsistent(t)
}

// TestPauseCrashPoints kills the daemon between the engine step and the
// state change of a filesystem pause and of its resume: after the restart
// no half state is left, and the retried call finishes.
func TestPauseCrashPoints(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 4*time.Minute)
	id := newSandbox(t, ctx, c)
	sh(t, ctx, c, id, "echo kept > /root/kept")

	d.Stop()
	d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=after-pause-stop"})
	// The daemon dies in the middle: the request gets no answer.
	_, _ = keyed(ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/pause", `{"mode":"filesystem"}`, "pause-1")
	if !d.Wait(60 * time.Second) {
		t.Fatal("daemon did not exit at the crash point")
	}
	d.Restart(nil)
	// The row said running over a stopped container: it runs again.
	wantState(t, ctx, c, id, "running", "")
	testkit.Eventually(t, 30*time.Second, "consistent", func() error {
		if v, err := d.Inconsistencies(ctx); err != nil || len(v) > 0 {
			return fmt.Errorf("%v %v", v, err)
		}
		return nil
	})
	if a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/pause", `{"mode":"filesystem"}`, "pause-1"); a.Status != http.StatusOK {
		t.Fatalf("retried pause: %d %s", a.Status, a.Body)
	}
	wantPaused(t, ctx, c, id, "filesystem", "")

	d.Stop()
	d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=after-resume-start"})
	a, err := keyed(ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/resume", ``, "resume-1")
	if !d.Wait(60 * time.Second) {
		t.Fatalf("daemon did not exit at the crash point: resume answered %d %s %v\n%s", a.Status, a.Body, err, d.Logs())
	}
	d.Restart(nil)
	// The row said paused over a running container: it is running.
	wantState(t, ctx, c, id, "running", "")
	if a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/resume", ``, "resume-1"); a.Status != http.StatusOK {
		t.Fatalf("retried resume: %d %s", a.Status, a.Body)
	}
	if got := readFileIn(t, ctx, c, id, "/root/kept"); got != "kept\n" {
		t.Fatalf("file after the crashes: %q", got)
	}
	d.CheckConsistent(t)
}

// TestPauseRetriesAndScopes: twenty concurrent pauses with one
// Idempotency-Key make one pause and all answer it; the same for resume. A
// read-only token is refused every pause, resume and archive, on every
// facade, and changes nothing.
func TestPauseRetriesAndScopes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	id := newSandbox(t, ctx, c)

	concurrently := func(path, body, key string) {
		t.Helper()
		var wg sync.WaitGroup
		answers := make(chan harness.Answer, 20)
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := keyed(ctx, d, http.MethodPost, path, body, key)
				if err != nil {
					a.Err = err
				}
				answers <- a
			}()
		}
		wg.Wait()
		close(answers)
		for a := range answers {
			// A duplicate that arrives while the first runs waits for it
			// and replays its answer.
			if a.Err != nil || a.Status != http.StatusOK {
				t.Fatalf("%s: %d %s %v", path, a.Status, a.Body, a.Err)
			}
		}
	}
	concurrently("/v1/sandboxes/"+id+"/pause", `{"mode":"filesystem"}`, "pause-once")
	wantPaused(t, ctx, c, id, "filesystem", "")
	concurrently("/v1/sandboxes/"+id+"/resume", ``, "resume-once")
	wantState(t, ctx, c, id, "running", "")

	mint := func(name string, scopes ...string) string {
		tok, err := c.CreateToken(ctx, client.TokenRequest{Name: name, Owner: "alice", Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Secret
	}
	ro, rw := mint("alice-ro", "sandboxes:read"), mint("alice-rw")
	sb, err := client.New(d.Addr, rw).Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id = sb.ID
	for _, a := range []struct{ what, path string }{
		{"v1 pause", "/v1/sandboxes/" + id + "/pause"},
		{"v1 resume", "/v1/sandboxes/" + id + "/resume"},
		{"E2B pause", "/e2b/sandboxes/" + id + "/pause"},
		{"Daytona archive", "/daytona/sandbox/" + id + "/archive"},
	} {
		var hdr []string
		if strings.HasPrefix(a.path, "/e2b/") {
			hdr = []string{"X-API-KEY", ro}
		}
		if got := raw(t, ctx, d, ro, http.MethodPost, a.path, `{}`, hdr...); got.Status != http.StatusForbidden {
			t.Errorf("read token, %s: %d %s, want 403", a.what, got.Status, got.Body)
		}
	}
	wantState(t, ctx, c, id, "running", "")
}

// archiveImages lists the archive images of a sandbox.
func archiveImages(t *testing.T, id string) []string {
	t.Helper()
	out, err := exec.Command("docker", "images", "-q", "--filter", "label=sandpit.archive="+id).CombinedOutput()
	if err != nil {
		t.Fatalf("docker images: %v: %s", err, out)
	}
	return strings.Fields(string(out))
}

// TestArchiveCrashPoint kills the daemon between the commit of a Daytona
// archive and its record: after the restart the sandbox is stopped with its
// container (no half archive), the retried archive finishes without leaving
// a second image, start restores the files, and a delete removes the image.
func TestArchiveCrashPoint(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 4*time.Minute)
	id := newSandbox(t, ctx, c)
	sh(t, ctx, c, id, "echo kept > /root/kept")
	archive := func() harness.Answer {
		return raw(t, ctx, d, d.Token, http.MethodPost, "/daytona/sandbox/"+id+"/archive", ``)
	}

	d.Stop()
	d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=after-archive-commit"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/daytona/sandbox/"+id+"/archive", nil)
	req.Header.Set("Authorization", "Bearer "+d.Token)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
	}
	if !d.Wait(60 * time.Second) {
		t.Fatal("daemon did not exit at the crash point")
	}
	d.Restart(nil)
	wantState(t, ctx, c, id, "stopped", "")
	d.CheckConsistent(t)

	if a := archive(); a.Status != http.StatusOK {
		t.Fatalf("retried archive: %d %s", a.Status, a.Body)
	}
	wantState(t, ctx, c, id, "stopped", "archived")
	if cs, err := d.SandboxContainers(ctx, id); err != nil || len(cs) != 0 {
		t.Fatalf("containers of the archived sandbox: %v %v", cs, err)
	}
	if imgs := archiveImages(t, id); len(imgs) != 1 {
		t.Fatalf("archive images: %v, want 1", imgs)
	}
	if _, err := c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := readFileIn(t, ctx, c, id, "/root/kept"); got != "kept\n" {
		t.Fatalf("file after the restore: %q", got)
	}
	d.CheckConsistent(t)
	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if imgs := archiveImages(t, id); len(imgs) != 0 {
		t.Fatalf("archive images after delete: %v", imgs)
	}
}
