package sandpit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestInterpreterTemplateBuiltAfterStart: the daemon serves without the
// code interpreter's image (a build of minutes), says in the create how to
// get it, and serves the template once the image exists, with no restart.
// The image is a fresh tag of the test image, so that the shared
// interpreter image of the machine is never touched.
func TestInterpreterTemplateBuiltAfterStart(t *testing.T) {
	t.Parallel()
	ref := "sandpit-test/late-interpreter-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ":" + time.Now().Format("150405.000000000")[7:]
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", ref).Run() })
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--interpreter-image", ref}})
	ctx := ctxFor(t, 2*time.Minute)
	c := d.Client()
	_, err := c.Create(ctx, client.CreateRequest{Template: "code-interpreter-v1"})
	if !client.IsCode(err, apitypes.CodeUnknownTemplate) || !strings.Contains(err.Error(), "no restart needed") {
		t.Fatalf("create before the image exists: %v; want unknown_template saying how to get it", err)
	}
	if !strings.Contains(d.Logs(), "served once it is") {
		t.Errorf("the daemon's log does not say the template comes later")
	}
	awaited := "template  code-interpreter-v1: image " + ref + " not built yet"
	if out, errOut, code := runCLI(t, ctx, d, nil, "status"); code != 0 || !strings.Contains(out, awaited) {
		t.Errorf("status before the image exists: %d %q %q; want %q", code, out, errOut, awaited)
	}
	if out, err := exec.Command("docker", "tag", testBase, ref).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v %s", err, out)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		sb, err := c.Create(ctx, client.CreateRequest{Template: "code-interpreter-v1"})
		if err == nil {
			if sb.Image != ref {
				t.Fatalf("created from image %s, want %s", sb.Image, ref)
			}
			break
		}
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != apitypes.CodeUnknownTemplate || time.Now().After(deadline) {
			t.Fatalf("create after the image was built: %v", err)
		}
	}
	checkTemplateServed(t, ctx, d)
}

// TestCreateWaitsForTemplateImageBuild: a create of the interpreter
// template while its image is being built waits for the build instead of
// failing, and says so: the daemon's log names the template and the step
// the build is at, `sandpit status` shows the build, and the CLI's create
// prints that it waits; an E2B create of it waits as well, and E2B's
// Template.exists finds it.
func TestCreateWaitsForTemplateImageBuild(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 4*time.Minute)
	d, ref, build := startLateBuild(t, ctx, "late-build")
	c := d.Client()
	const at = "step 3/3: RUN test"

	// The build is at its last step: status says so.
	if out, errOut, code := runCLI(t, ctx, d, nil, "status"); code != 0 || !strings.Contains(out, "template  code-interpreter-v1: image "+ref+" not built yet; building ("+at) {
		t.Fatalf("status during the build: %d %q %q; want the build and its step", code, out, errOut)
	}
	// The E2B SDK's Template.exists: the template exists while its image
	// is being built, since a create of it waits for the build.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/e2b/templates/aliases/code-interpreter-v1", nil)
	req.Header.Set("X-API-KEY", d.Token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("E2B alias check during the build: %v %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}

	// A create now waits; the test lets the build end only once the
	// daemon's log shows the create waiting.
	type result struct {
		out, errOut string
		code        int
		err         error
	}
	created := make(chan result, 1)
	go func() {
		cmd := exec.CommandContext(ctx, sandpitBin, "create", "--template", "code-interpreter-v1")
		cmd.Env = append(os.Environ(), "SANDPIT_ADDR="+d.Addr, "SANDPIT_TOKEN="+d.Token)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			created <- result{out.String(), errOut.String(), ee.ExitCode(), nil}
			return
		}
		created <- result{out.String(), errOut.String(), 0, err}
	}()
	// The E2B code-interpreter SDK's create, the same template by E2B's
	// name for it, waits too.
	type e2bResult struct {
		status int
		body   string
		err    error
	}
	e2bCreated := make(chan e2bResult, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/v2/sandboxes", strings.NewReader(`{"templateID":"code-interpreter-v1"}`))
		req.Header.Set("X-API-KEY", d.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			e2bCreated <- e2bResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		e2bCreated <- e2bResult{resp.StatusCode, string(b), err}
	}()
	waitLine := waitingCreates(t, ctx, d, 2, func() string {
		select {
		case r := <-created:
			return fmt.Sprintf("the create: %+v", r)
		case r := <-e2bCreated:
			return fmt.Sprintf("the E2B create: %+v", r)
		default:
			return ""
		}
	})[0]
	for _, want := range []string{"template=code-interpreter-v1", "image=" + ref, at} {
		if !strings.Contains(waitLine, want) {
			t.Errorf("the daemon's log line %q does not name %q", waitLine, want)
		}
	}
	if err := build.finish("go"); err != nil {
		t.Fatalf("build: %v\n%s", err, build.log.String())
	}
	r := <-created
	t.Logf("the daemon logged: %s\nthe create said: %s", waitLine, r.errOut)
	if r.err != nil || r.code != 0 {
		t.Fatalf("create: exit %d %v, stderr %q", r.code, r.err, r.errOut)
	}
	if want := "waiting for template code-interpreter-v1's image " + ref + " (building, " + at; !strings.Contains(r.errOut, want) {
		t.Errorf("the create's stderr %q does not say %q", r.errOut, want)
	}
	sb, err := c.Get(ctx, strings.TrimSpace(r.out))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctxFor(t, time.Minute), sb.ID) })
	if sb.Image != ref {
		t.Errorf("created from image %s, want %s", sb.Image, ref)
	}
	e := <-e2bCreated
	var e2bSandbox struct {
		SandboxID string `json:"sandboxID"`
	}
	if e.err != nil || e.status != http.StatusCreated || json.Unmarshal([]byte(e.body), &e2bSandbox) != nil {
		t.Fatalf("E2B create: %d %q %v", e.status, e.body, e.err)
	}
	t.Cleanup(func() { _ = c.Delete(ctxFor(t, time.Minute), e2bSandbox.SandboxID) })
	if got, err := c.Get(ctx, e2bSandbox.SandboxID); err != nil || got.Image != ref {
		t.Errorf("the E2B create's sandbox: image %q, %v; want %s", got.Image, err, ref)
	}
	if !strings.Contains(build.log.String(), at) {
		t.Errorf("the build's own log does not show its steps:\n%s", build.log.String())
	}
	checkTemplateServed(t, ctx, d)
}

// TestCreateWaitingForAFailedBuild: a create waiting for a build that fails
// is answered when the build ends, with the template and the image named,
// and makes nothing.
func TestCreateWaitingForAFailedBuild(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 4*time.Minute)
	d, ref, build := startLateBuild(t, ctx, "late-failed-build")
	c := d.Client()
	created := make(chan error, 1)
	go func() {
		_, err := c.Create(ctx, client.CreateRequest{Template: "code-interpreter-v1"})
		created <- err
	}()
	waitingCreates(t, ctx, d, 1, func() string {
		select {
		case err := <-created:
			return fmt.Sprintf("the create: %v", err)
		default:
			return ""
		}
	})
	if err := build.finish("stop"); err == nil {
		t.Fatal("the build succeeded; want it failed")
	}
	err := <-created
	if !client.IsCode(err, apitypes.CodeUnknownTemplate) || !strings.Contains(err.Error(), "the build of its image "+ref+" ended without making it") {
		t.Fatalf("create after the build failed: %v; want unknown_template naming the build's end", err)
	}
	if list, _, err := c.List(ctx, client.ListOptions{}); err != nil || len(list) != 0 {
		t.Fatalf("sandboxes after the failed create: %v %v; want none", list, err)
	}
}

// gatedBuild is a real build of a throwaway two-step recipe on the test
// image, run the way scripts/build-code-interpreter-image.sh runs its own
// (through scripts/lib/image-build.sh, recording its progress in a cache
// directory of the test's). Its last step waits for the test: it reads a
// line from a listener here and succeeds only when the line is "go".
type gatedBuild struct {
	cmd *exec.Cmd
	// cache is the directory the build records its progress in.
	cache string
	step  net.Conn
	done  chan error
	// log is the build's output, to read once done has answered.
	log *bytes.Buffer
}

// checkTemplateServed checks that d says its interpreter template, awaited
// until now, is served.
func checkTemplateServed(t *testing.T, ctx context.Context, d *harness.Daemon) {
	t.Helper()
	if !strings.Contains(d.Logs(), "template available: its image was built") {
		t.Errorf("the daemon's log does not say the template became available")
	}
	// Only this template: the daemon's other late templates (the desktop's,
	// which CI builds in the background) may still be awaited.
	if out, _, _ := runCLI(t, ctx, d, nil, "status"); strings.Contains(out, "template  code-interpreter-v1: ") {
		t.Errorf("status once the image exists still awaits it:\n%s", out)
	}
}

// waitingCreates returns the daemon's log lines of n creates waiting for a
// template's image, once there are n. ended says what ended early, if a
// create did: it should still be waiting.
func waitingCreates(t *testing.T, ctx context.Context, d *harness.Daemon, n int, ended func() string) []string {
	t.Helper()
	for {
		var lines []string
		for _, line := range strings.Split(d.Logs(), "\n") {
			if strings.Contains(line, "create waits for its template's image to be built") {
				lines = append(lines, line)
			}
		}
		if len(lines) >= n {
			return lines
		}
		if what := ended(); what != "" {
			t.Fatalf("%s ended while the image was being built", what)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the daemon's log never showed %d creates waiting:\n%s", n, d.Logs())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startLateBuild starts a daemon whose interpreter template's image is a
// throwaway one (sandpit-test/NAME-...) not built yet, with a cache
// directory of its own, and a gated build of that image; it returns once
// the build is at its last step.
func startLateBuild(t *testing.T, ctx context.Context, name string) (*harness.Daemon, string, *gatedBuild) {
	t.Helper()
	repo := "sandpit-test/" + name + "-" + strings.ToLower(time.Now().Format("150405.000000000")[7:])
	ref := repo + ":latest"
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", ref).Run() })
	cache := t.TempDir()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--interpreter-image", ref, "--image-cache-dir", cache}})
	return d, ref, startGatedBuild(t, ctx, cache, repo, ref)
}

// startGatedBuild starts the build of ref (repository repo) and returns
// once it is at its last step.
func startGatedBuild(t *testing.T, ctx context.Context, cache, repo, ref string) *gatedBuild {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	recipe := t.TempDir()
	dockerfile := fmt.Sprintf("FROM %s\nRUN echo first\nRUN test \"$(nc 127.0.0.1 %d </dev/null)\" = go\n", testBase, ln.Addr().(*net.TCPAddr).Port)
	if err := os.WriteFile(filepath.Join(recipe, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	lib, err := filepath.Abs(filepath.Join("..", "scripts", "lib", "image-build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// The interpreter script's own build line, after its
	// record_build_progress, then its tagging of the built image as the
	// daemon names it (point_latest); host network, so that the step
	// reaches the test.
	// --force-rm, unlike the script: a build this test fails or kills
	// would leave its step's container on the engine, which the script's
	// builds, which succeed, do not. A kill can still leave it (the engine
	// may be mid-step), so the cleanup removes the step's container by the
	// port only it names.
	port := ln.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() {
		_ = exec.Command("docker", "image", "rm", repo+":built").Run()
		out, _ := exec.Command("docker", "ps", "-a", "-q", "--filter", "label=sandpit.test-image.hash").Output()
		for _, id := range strings.Fields(string(out)) {
			cmd, _ := exec.Command("docker", "inspect", "-f", "{{json .Config.Cmd}}", id).Output()
			if strings.Contains(string(cmd), fmt.Sprintf("nc 127.0.0.1 %d ", port)) {
				_ = exec.Command("docker", "rm", "-f", id).Run()
			}
		}
	})
	cmd := exec.CommandContext(ctx, "bash", "-c", `set -euo pipefail; . "$1"; record_build_progress "$2"; docker build --force-rm --network=host --pull=false -q -t "$2:built" "$4" >/dev/null; docker tag "$2:built" "$3"`, "build", lib, repo, ref, recipe)
	cmd.Env = append(os.Environ(), "SANDPIT_CACHE_DIR="+cache)
	// A group of its own, so that kill ends the script and its docker CLI.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g := &gatedBuild{cmd: cmd, cache: cache, done: make(chan error, 1), log: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = g.log, g.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.done <- cmd.Wait() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			accepted <- conn
		}
	}()
	select {
	case g.step = <-accepted:
	case err := <-g.done:
		t.Fatalf("the build ended before its last step: %v\n%s", err, g.log.String())
	}
	t.Cleanup(func() { g.step.Close() })
	return g
}

// finish answers the build's last step and returns how the build ended.
func (g *gatedBuild) finish(answer string) error {
	if _, err := g.step.Write([]byte(answer + "\n")); err != nil {
		return err
	}
	g.step.Close()
	return <-g.done
}

// kill ends the build script as SIGKILL does, before its exit trap can
// remove its progress file, and waits for it to be gone.
func (g *gatedBuild) kill() {
	_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	<-g.done
}

// TestCreateAfterAKilledBuild: a build killed before it could tidy up
// leaves its progress file behind; the daemon does not take it for a
// running build, so a create is answered at once, saying the image is not
// built, instead of waiting for a build nobody runs.
func TestCreateAfterAKilledBuild(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 4*time.Minute)
	d, ref, build := startLateBuild(t, ctx, "late-killed-build")
	build.kill()
	if left, _ := filepath.Glob(filepath.Join(build.cache, "*.progress")); len(left) != 1 {
		t.Fatalf("progress files after the kill: %v; want the killed build's", left)
	}
	_, err := d.Client().Create(ctx, client.CreateRequest{Template: "code-interpreter-v1"})
	if !client.IsCode(err, apitypes.CodeUnknownTemplate) || !strings.Contains(err.Error(), "not built on this machine yet") {
		t.Fatalf("create after the build was killed: %v; want unknown_template saying the image is not built", err)
	}
	out, _, _ := runCLI(t, ctx, d, nil, "status")
	if !strings.Contains(out, "image "+ref+" not built yet; served") {
		t.Errorf("status after the build was killed:\n%s\nwant the template awaited, with no build", out)
	}
	if strings.Contains(d.Logs(), "create waits for its template's image") {
		t.Errorf("the daemon's log shows a create waiting for a killed build")
	}
}
