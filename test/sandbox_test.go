package sandpit_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSandboxExecFilesDelete(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)

	sb, err := c.Create(ctx, client.CreateRequest{Env: map[string]string{"GREETING": "hi there"}, Labels: map[string]string{"suite": "exec"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != "running" {
		t.Fatalf("state = %q, want running", sb.State)
	}

	cases := []struct {
		name       string
		req        client.ExecRequest
		wantOut    string
		wantErr    string
		wantStatus int
	}{
		{"echo", client.ExecRequest{Cmd: "echo", Args: []string{"hello"}}, "hello\n", "", 0},
		{"stderr and exit code", client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo e >&2; exit 3"}}, "", "e\n", 3},
		{"create-time env", client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $GREETING"}}, "hi there\n", "", 0},
		{"exec env overrides", client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $GREETING"}, Env: map[string]string{"GREETING": "yo"}}, "yo\n", "", 0},
		{"cwd", client.ExecRequest{Cmd: "pwd", Cwd: "/tmp"}, "/tmp\n", "", 0},
		{"agent token hidden", client.ExecRequest{Cmd: "sh", Args: []string{"-c", "env | grep -c SANDPIT_AGENT_TOKEN || true"}}, "0\n", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.Exec(ctx, sb.ID, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Stdout != tc.wantOut || res.Stderr != tc.wantErr || res.ExitCode != tc.wantStatus {
				t.Fatalf("got (%q, %q, %d), want (%q, %q, %d)", res.Stdout, res.Stderr, res.ExitCode, tc.wantOut, tc.wantErr, tc.wantStatus)
			}
		})
	}

	// Streaming exec through the proxied agent protocol.
	var out, errb bytes.Buffer
	code, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo one; echo two >&2; exit 7"}}, &out, &errb)
	if err != nil || code != 7 || out.String() != "one\n" || errb.String() != "two\n" {
		t.Fatalf("ExecStream = %d %v %q %q", code, err, out.String(), errb.String())
	}

	// A 5 MiB binary file round-trips byte-identical.
	blob := make([]byte, 5<<20)
	_, _ = rand.Read(blob)
	if err := c.WriteFile(ctx, sb.ID, "/tmp/data/blob.bin", blob); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := c.ReadFile(ctx, sb.ID, "/tmp/data/blob.bin", &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), blob) {
		t.Fatalf("read back %d bytes, not identical to the %d written", got.Len(), len(blob))
	}
	ls, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "ls", Args: []string{"/tmp/data"}})
	if err != nil || ls.Stdout != "blob.bin\n" {
		t.Fatalf("ls = %q %v", ls.Stdout, err)
	}
	if err := c.ReadFile(ctx, sb.ID, "/tmp/nope", io.Discard); !isStatus(err, 404) {
		t.Fatalf("reading a missing file: %v, want 404", err)
	}

	// Labels filter the listing.
	page, _, err := c.List(ctx, client.ListOptions{Labels: map[string]string{"suite": "exec"}})
	if err != nil || len(page) != 1 || page[0].ID != sb.ID {
		t.Fatalf("list by label = %v %v", page, err)
	}

	if n := len(d.Containers(t, "sandpit.sandbox-id="+sb.ID)); n != 1 {
		t.Fatalf("%d containers before delete, want 1", n)
	}
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Containers(t, "sandpit.sandbox-id="+sb.ID)); n != 0 {
		t.Fatalf("%d containers after delete, want 0", n)
	}
	if _, err := c.Get(ctx, sb.ID); !isStatus(err, 404) {
		t.Fatalf("get after delete: %v, want 404", err)
	}
}

func isStatus(err error, status int) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Status == status
}

func TestStopStart(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, sb.ID, "/root/keep.txt", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Stop(ctx, sb.ID); err != nil || st.State != "stopped" {
		t.Fatalf("stop = %v %v", st.State, err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "true"}); !isStatus(err, 409) {
		t.Fatalf("exec on a stopped sandbox: %v, want 409", err)
	}
	if st, err := c.Start(ctx, sb.ID); err != nil || st.State != "running" {
		t.Fatalf("start = %v %v", st.State, err)
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "cat", Args: []string{"/root/keep.txt"}})
	if err != nil || res.Stdout != "kept" {
		t.Fatalf("file after restart = %q %v", res.Stdout, err)
	}
}

func TestConcurrentCreatesWithOneName(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	const n = 20
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = rawStatus(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{"name":"only-one"}`, nil)
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	if count[201] != 1 || count[409] != n-1 {
		t.Fatalf("statuses = %v, want one 201 and %d 409s", count, n-1)
	}
	page, _, err := d.Client().List(ctx, client.ListOptions{})
	if err != nil || len(page) != 1 || page[0].Name != "only-one" {
		t.Fatalf("list = %v %v", page, err)
	}
	if got := d.Containers(t, "sandpit.sandbox-id="+page[0].ID); len(got) != 1 {
		t.Fatalf("%d containers for the named sandbox, want 1", len(got))
	}
	if got := d.Containers(t); len(got) != 1 {
		t.Fatalf("%d containers in all, want 1", len(got))
	}
}

// rawStatus sends one request and returns the status (bodies are checked by
// rawJSON).
func rawStatus(t *testing.T, ctx context.Context, d *harness.Daemon, method, path, body string, header http.Header) int {
	status, _ := rawJSON(t, ctx, d, method, path, body, header)
	return status
}

func rawJSON(t *testing.T, ctx context.Context, d *harness.Daemon, method, path, body string, header http.Header) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, d.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func TestBadInputCreatesNothing(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, time.Minute)
	cases := []struct {
		name, body string
		wantCode   string
		wantStatus int
	}{
		{"malformed json", `{"name": `, "bad_request", 400},
		{"unknown field", `{"nmae": "x"}`, "bad_request", 400},
		{"unknown image", `{"image": "sandpit/no-such-image:never"}`, "unknown_image", 400},
		{"invalid image reference", `{"image": "UPPER CASE!"}`, "bad_request", 400},
		{"negative memory", `{"memory_mb": -1}`, "bad_request", 400},
		{"negative cpu", `{"cpu": -2}`, "bad_request", 400},
		{"invalid name", `{"name": "no spaces allowed"}`, "bad_request", 400},
		{"invalid env name", `{"env": {"1BAD": "x"}}`, "bad_request", 400},
		{"negative timeout", `{"timeout_s": -5}`, "bad_request", 400},
		{"oversized body", `{"labels": {"k": "` + strings.Repeat("x", 2<<20) + `"}}`, "body_too_large", 413},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawJSON(t, ctx, d, http.MethodPost, "/v1/sandboxes", tc.body, nil)
			errObj, _ := body["error"].(map[string]any)
			if status != tc.wantStatus || errObj["code"] != tc.wantCode {
				t.Fatalf("got %d %v, want %d %s", status, body, tc.wantStatus, tc.wantCode)
			}
		})
	}
	if s := rawStatus(t, ctx, d, http.MethodGet, "/v1/sandboxes/sbnope", "", nil); s != 404 {
		t.Fatalf("unknown id: %d, want 404", s)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/v1/sandboxes", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("no token: %v %v, want 401", resp, err)
	}
	page, _, err := d.Client().List(ctx, client.ListOptions{})
	if err != nil || len(page) != 0 {
		t.Fatalf("after bad input: %d sandboxes, %v", len(page), err)
	}
	if got := d.Containers(t); len(got) != 0 {
		t.Fatalf("after bad input: %d containers", len(got))
	}
}

// TestCrashBetweenContainerCreateAndRow kills the daemon right after the
// container is created; after a restart the orphan is removed and there is
// no row.
func TestCrashBetweenContainerCreateAndRow(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	d.Stop()
	d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=after-container-create"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/v1/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+d.Token)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("create answered %d; the daemon should have died", resp.StatusCode)
	}
	if !d.Wait(30 * time.Second) {
		t.Fatal("daemon did not exit at the crash point")
	}
	if got := d.Containers(t); len(got) != 1 {
		t.Fatalf("%d containers after the crash, want the 1 half-made one", len(got))
	}
	d.Restart(nil)
	// The restart's reconcile unwinds the interrupted create beside serving
	// (an engine that is slow to remove must not hold up the API), so the
	// orphan goes soon after the daemon answers, not before.
	deadline := time.Now().Add(30 * time.Second)
	for got := d.Containers(t); len(got) != 0; got = d.Containers(t) {
		if time.Now().After(deadline) {
			t.Fatalf("%d containers 30 s after the restart, want 0 (orphan removed)", len(got))
		}
		time.Sleep(100 * time.Millisecond)
	}
	page, _, err := d.Client().List(ctx, client.ListOptions{})
	if err != nil || len(page) != 0 {
		t.Fatalf("rows after restart: %v %v", page, err)
	}
}

// TestForkBombIsContained runs a fork bomb in one sandbox; its pids limit
// holds it, and the daemon and another sandbox keep answering meanwhile.
func TestForkBombIsContained(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)
	bomb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	bombDone := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, bomb.ID, client.ExecRequest{Cmd: "bash", Args: []string{"-c", "bomb() { bomb | bomb & }; bomb"}, TimeoutS: 10})
		bombDone <- err
	}()
	time.Sleep(2 * time.Second)
	for i := 0; i < 5; i++ {
		res, err := c.Exec(ctx, other.ID, client.ExecRequest{Cmd: "echo", Args: []string{"alive"}, TimeoutS: 20})
		if err != nil || res.Stdout != "alive\n" {
			t.Fatalf("other sandbox during the bomb: %q %v", res.Stdout, err)
		}
		if _, _, err := c.List(ctx, client.ListOptions{}); err != nil {
			t.Fatalf("daemon during the bomb: %v", err)
		}
	}
	<-bombDone
	// The limit was what stopped it: the bomb's cgroup hit pids.max.
	out, err := run(ctx, t, "docker", "inspect", "-f", "{{.HostConfig.PidsLimit}}", "sandpit-"+bomb.ID)
	if err != nil || strings.TrimSpace(out) != "1024" {
		t.Fatalf("pids limit = %q %v", out, err)
	}
	if err := c.Delete(ctx, bomb.ID); err != nil {
		t.Fatalf("delete the bombed sandbox: %v", err)
	}
}

// TestReleaseBuildIgnoresCrashPoint builds the binary without the crash-point
// build tag, as a release is built, and sets the crash point anyway: the
// daemon must create the sandbox and keep serving.
func TestReleaseBuildIgnoresCrashPoint(t *testing.T) {
	t.Parallel()
	bin, err := harness.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, point := range []string{"after-container-create", "before-response"} {
		t.Run(point, func(t *testing.T) {
			d := harness.Start(t, bin, harness.Options{Env: []string{"SANDPIT_TEST_CRASH_POINT=" + point}})
			ctx := ctxFor(t, 2*time.Minute)
			c := d.Client()
			sb, err := c.Create(ctx, client.CreateRequest{})
			if err != nil {
				t.Fatalf("create with %s set on a release build: %v\n%s", point, err, d.Logs())
			}
			if _, err := c.Get(ctx, sb.ID); err != nil {
				t.Fatalf("daemon after the create: %v", err)
			}
			if !strings.Contains(d.Logs(), "built without crash points") {
				t.Errorf("the daemon did not say it ignores the crash point:\n%s", d.Logs())
			}
		})
	}
}
