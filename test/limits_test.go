package sandpit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

// inspectHost reads the engine's view of a sandbox container's limits.
type inspectHost struct {
	NanoCPUs   int64
	Memory     int64
	MemorySwap int64
	PidsLimit  *int64
	Runtime    string
}

func dockerInspectHost(t *testing.T, ctx context.Context, sandboxID string) inspectHost {
	t.Helper()
	out, err := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{json .HostConfig}}", "sandpit-"+sandboxID).Output()
	if err != nil {
		t.Fatalf("docker inspect: %v", err)
	}
	var h inspectHost
	if err := json.Unmarshal(out, &h); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	return h
}

// TestDefaultLimits: a sandbox created with no limits gets the daemon's
// defaults (1 CPU, 1024 MiB without swap, 1024 pids) as the engine sees them,
// and a process allocating past 1024 MiB is OOM-killed while one below it
// runs. Explicit limits within the maxima are kept; beyond them, 400.
func TestDefaultLimits(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--max-cpu", "2", "--max-memory-mb", "2048"}})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)

	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	h := dockerInspectHost(t, ctx, sb.ID)
	if h.NanoCPUs != 1e9 || h.Memory != 1024<<20 || h.MemorySwap != 1024<<20 || h.PidsLimit == nil || *h.PidsLimit != 1024 || h.Runtime != "runc" {
		t.Fatalf("docker inspect: %+v, want 1 CPU, 1024 MiB without swap, 1024 pids, runc", h)
	}
	if sb.CPU != 1 || sb.MemoryMB != 1024 {
		t.Fatalf("the API reports cpu %v memory %d, want the defaults 1 and 1024", sb.CPU, sb.MemoryMB)
	}

	// dd allocates its whole block and fills it: 1100 MiB passes the limit.
	hog, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "dd", Args: []string{"if=/dev/zero", "of=/dev/null", "bs=1100M", "count=1"}, TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	// The agent reports a process killed by a signal with exit code -1;
	// the container's memory cgroup counts the OOM kill.
	if hog.ExitCode != -1 && hog.ExitCode != 137 {
		t.Fatalf("memory hog: exit %d stderr %q, want killed (-1)", hog.ExitCode, hog.Stderr)
	}
	oom, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c",
		"cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null | grep '^oom_kill '"}})
	if err != nil || !strings.HasPrefix(oom.Stdout, "oom_kill ") || strings.TrimSpace(strings.TrimPrefix(oom.Stdout, "oom_kill ")) == "0" {
		t.Fatalf("the memory cgroup counts no OOM kill: %q %v", oom.Stdout, err)
	}
	fits, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "dd", Args: []string{"if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"}, TimeoutS: 60})
	if err != nil || fits.ExitCode != 0 {
		t.Fatalf("256 MiB within the limit: %v exit %d stderr %q", err, fits.ExitCode, fits.Stderr)
	}

	big, err := c.Create(ctx, client.CreateRequest{CPU: 2, MemoryMB: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if h := dockerInspectHost(t, ctx, big.ID); h.NanoCPUs != 2e9 || h.Memory != 2048<<20 {
		t.Fatalf("explicit limits: %+v, want 2 CPUs and 2048 MiB", h)
	}
	before := len(d.Containers(t))
	for _, body := range []string{`{"cpu":2.5}`, `{"memory_mb":4096}`} {
		status, code, msg, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes", body, nil)
		if err != nil || status != http.StatusBadRequest {
			t.Fatalf("create %s above the maxima: %d %s %s %v, want 400", body, status, code, msg, err)
		}
	}
	if after := len(d.Containers(t)); after != before {
		t.Fatalf("refused creates left containers: %d -> %d", before, after)
	}
}

// TestMaxSandboxes: under --max-sandboxes 3 the fourth create, native or
// E2B, is 429 quota_exceeded and creates nothing; deleting one frees a slot.
func TestMaxSandboxes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--max-sandboxes", "3"}})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)

	var ids []string
	for range 3 {
		ids = append(ids, newSandbox(t, ctx, c))
	}
	status, code, msg, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes", `{}`, nil)
	if err != nil || status != http.StatusTooManyRequests || code != "quota_exceeded" {
		t.Fatalf("fourth create: %d %s %s %v, want 429 quota_exceeded", status, code, msg, err)
	}
	e2bStatus, e2bBody := e2bCreate(t, ctx, d, `{"templateID":"base","metadata":{"t":"quota"}}`)
	if e2bStatus != http.StatusTooManyRequests {
		t.Fatalf("fourth create through E2B: %d %s, want 429", e2bStatus, e2bBody)
	}
	if n := len(d.Containers(t)); n != 3 {
		t.Fatalf("%d containers after refused creates, want 3", n)
	}
	list, _, err := c.List(ctx, client.ListOptions{})
	if err != nil || len(list) != 3 {
		t.Fatalf("list: %d sandboxes (%v), want 3", len(list), err)
	}
	if err := c.Delete(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	newSandbox(t, ctx, c)
}

// e2bCreate posts a raw E2B create and returns the status and body.
func e2bCreate(t *testing.T, ctx context.Context, d *harness.Daemon, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/v2/sandboxes", strings.NewReader(body))
	req.Header.Set("X-API-KEY", d.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestBadCreateInput: reserved env names, NUL bytes in env values and
// malformed image references are 400 on every surface, and nothing is made.
func TestBadCreateInput(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)

	send := func(method, path, body string, header map[string]string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, d.URL()+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	bearer := map[string]string{"Authorization": "Bearer " + d.Token}
	apiKey := map[string]string{"X-API-KEY": d.Token}
	for _, tc := range []struct {
		name, path, body string
		header           map[string]string
	}{
		{"v1 reserved env", "/v1/sandboxes", `{"env":{"SANDPIT_AGENT_CHILD":"1"}}`, bearer},
		{"v1 reserved env, lower case", "/v1/sandboxes", `{"env":{"sandpit_agent_token":"x"}}`, bearer},
		{"v1 NUL in env value", "/v1/sandboxes", `{"env":{"A":"x\u0000y"}}`, bearer},
		{"v1 malformed image", "/v1/sandboxes", `{"image":"Upper/Case::tag"}`, bearer},
		{"v1 malformed image digest", "/v1/sandboxes", `{"image":"busybox@sha256:zz"}`, bearer},
		{"e2b reserved env", "/e2b/v2/sandboxes", `{"templateID":"base","envVars":{"SANDPIT_AGENT_CHILD":"1"}}`, apiKey},
		{"e2b NUL in env value", "/e2b/v2/sandboxes", `{"templateID":"base","envVars":{"A":"\u0000"}}`, apiKey},
		{"daytona reserved env", "/daytona/sandbox", `{"env":{"SANDPIT_AGENT_CHILD":"1"}}`, bearer},
		{"daytona NUL in env value", "/daytona/sandbox", `{"env":{"A":"\u0000"}}`, bearer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := send(http.MethodPost, tc.path, tc.body, tc.header)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d %s, want 400", status, body)
			}
		})
	}
	if n := len(d.Containers(t)); n != 0 {
		t.Fatalf("refused creates left %d containers", n)
	}

	// Exec env is checked the same way.
	c := d.Client()
	id := newSandbox(t, ctx, c)
	status, code, _, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/exec", `{"cmd":"true","env":{"SANDPIT_AGENT_CHILD":"1"}}`, nil)
	if err != nil || status != http.StatusBadRequest {
		t.Fatalf("exec with a reserved env name: %d %s %v, want 400", status, code, err)
	}
}

// gatewayGet fetches / of a sandbox port through the E2B gateway.
func gatewayGet(t *testing.T, ctx context.Context, d *harness.Daemon, id string, port int, trafficToken string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/e2b/envd/", nil)
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", fmt.Sprint(port))
	if trafficToken != "" {
		req.Header.Set("E2b-Traffic-Access-Token", trafficToken)
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// previewGet fetches / of <port>-<id>.<domain> through the preview proxy.
func previewGet(t *testing.T, ctx context.Context, d *harness.Daemon, id string, port int, trafficToken string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.ProxyAddr+"/", nil)
	req.Host = fmt.Sprintf("%d-%s.localhost", port, id)
	if trafficToken != "" {
		req.Header.Set("E2b-Traffic-Access-Token", trafficToken)
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestPortAccess: who reaches which port. A native sandbox's unexposed port
// is 403 through the E2B gateway and unrouted through the proxy; exposed, it
// answers. An E2B sandbox serves every port; one created with
// allowPublicTraffic false only to requests carrying its traffic token. A
// custom domain may not point at the agent port.
func TestPortAccess(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 3*time.Minute)

	native := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, native, 8080, "native")
	testkit.Eventually(t, 10*time.Second, "httpd in the sandbox", func() error {
		res, err := c.Exec(ctx, native, client.ExecRequest{Cmd: "wget", Args: []string{"-q", "-O", "-", "http://127.0.0.1:8080/"}})
		if err != nil || res.ExitCode != 0 {
			return fmt.Errorf("wget: %v %+v", err, res)
		}
		return nil
	})
	if got := gatewayGet(t, ctx, d, native, 8080, ""); got != http.StatusForbidden {
		t.Fatalf("native unexposed port through the gateway: %d, want 403", got)
	}
	if got := previewGet(t, ctx, d, native, 8080, ""); got != http.StatusNotFound {
		t.Fatalf("native unexposed port through the proxy: %d, want 404", got)
	}
	mustExpose(t, ctx, d, native, 8080, "http", http.StatusCreated)
	if got := gatewayGet(t, ctx, d, native, 8080, ""); got != http.StatusOK {
		t.Fatalf("native exposed port through the gateway: %d, want 200", got)
	}
	if status, _, code, err := addDomain(ctx, d, native, "agent.example.test", 49983); err != nil || status != http.StatusBadRequest {
		t.Fatalf("custom domain to the agent port: %d %s %v, want 400", status, code, err)
	}

	for _, tc := range []struct {
		name    string
		body    string
		private bool
	}{
		{"e2b public", `{"templateID":"base","metadata":{"t":"public"}}`, false},
		{"e2b private", `{"templateID":"base","metadata":{"t":"private"},"network":{"allowPublicTraffic":false}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := e2bCreate(t, ctx, d, tc.body)
			if status != http.StatusCreated {
				t.Fatalf("create: %d %s", status, body)
			}
			var created struct {
				SandboxID          string `json:"sandboxID"`
				TrafficAccessToken string `json:"trafficAccessToken"`
			}
			if err := json.Unmarshal(body, &created); err != nil {
				t.Fatal(err)
			}
			if (created.TrafficAccessToken != "") != tc.private {
				t.Fatalf("trafficAccessToken %q for private=%v", created.TrafficAccessToken, tc.private)
			}
			id := created.SandboxID
			startHTTPD(t, ctx, c, id, 8000, "e2b")
			want := http.StatusOK
			if tc.private {
				want = http.StatusForbidden
			}
			testkit.Eventually(t, 10*time.Second, "the sandbox's server through the gateway", func() error {
				if got := gatewayGet(t, ctx, d, id, 8000, created.TrafficAccessToken); got != http.StatusOK {
					return fmt.Errorf("status %d", got)
				}
				return nil
			})
			if got := gatewayGet(t, ctx, d, id, 8000, ""); got != want {
				t.Fatalf("gateway without a traffic token: %d, want %d", got, want)
			}
			if got := previewGet(t, ctx, d, id, 8000, ""); got != want {
				t.Fatalf("preview host without a traffic token: %d, want %d", got, want)
			}
			if got := previewGet(t, ctx, d, id, 8000, created.TrafficAccessToken); got != http.StatusOK {
				t.Fatalf("preview host with the traffic token: %d, want 200", got)
			}
			if tc.private {
				if got := gatewayGet(t, ctx, d, id, 8000, "wrong"); got != http.StatusForbidden {
					t.Fatalf("gateway with a wrong traffic token: %d, want 403", got)
				}
			}
		})
	}
}

// TestSlowClients: idle keep-alive connections to the proxy are closed after
// --idle-timeout, a request body trickling in at 1 byte/s to an endpoint that
// answers 401 is cut off after --read-timeout, and the daemon's memory stays
// bounded while 200 such connections are open.
func TestSlowClients(t *testing.T) {
	t.Parallel()
	const idle, read = 2 * time.Second, 2 * time.Second
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--idle-timeout", idle.String(), "--read-timeout", read.String()}})
	rss0 := d.RSSKiB(t)

	// 200 keep-alive connections, each after one answered request.
	const n = 200
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.Dial("tcp", d.ProxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: nothing-%d.localhost\r\n\r\n", i)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	rssIdle := d.RSSKiB(t)

	// Slow bodies to the API, which answers 401 without reading them.
	const slow = 20
	cut := make(chan time.Duration, slow)
	var wg sync.WaitGroup
	for range slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", d.Addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			start := time.Now()
			fmt.Fprintf(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = io.Copy(io.Discard, c) // the 401, then EOF when the server cuts
			}()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			giveUp := time.After(30 * time.Second)
			for {
				select {
				case <-done:
					cut <- time.Since(start)
					return
				case <-tick.C:
					if _, err := io.WriteString(c, "1\r\nx\r\n"); err != nil {
						<-done
						cut <- time.Since(start)
						return
					}
				case <-giveUp:
					t.Error("a 1 byte/s body was not cut off within 30 s")
					return
				}
			}
		}()
	}
	rssSlow := d.RSSKiB(t)

	// Every idle connection is closed by the server.
	deadline := time.Now().Add(idle + 10*time.Second)
	for i, c := range conns {
		_ = c.SetReadDeadline(deadline)
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("idle connection %d: read %v, want EOF (closed by the server)", i, err)
		}
	}
	wg.Wait()
	close(cut)
	for took := range cut {
		if took > read+10*time.Second {
			t.Errorf("slow body cut after %s, want about %s", took, read)
		}
	}
	rssEnd := d.RSSKiB(t)
	t.Logf("daemon RSS: start %d KiB, 200 idle connections %d KiB, +%d slow bodies %d KiB, after %d KiB", rss0, rssIdle, slow, rssSlow, rssEnd)
	if rssEnd > rss0+64<<10 {
		t.Fatalf("daemon RSS grew from %d to %d KiB", rss0, rssEnd)
	}
}

// TestUploadLimit: under --max-upload-mb 1 a 2 MiB upload is 413, whether
// its length is announced (refused before it is read) or it arrives chunked
// through the E2B gateway (cut at the limit), and a 512 KiB one passes.
func TestUploadLimit(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--max-upload-mb", "1"}})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, sb.ID, "/tmp/small", make([]byte, 512<<10)); err != nil {
		t.Fatalf("512 KiB upload: %v", err)
	}
	err = c.WriteFile(ctx, sb.ID, "/tmp/big", make([]byte, 2<<20))
	if !client.IsCode(err, "body_too_large") {
		t.Fatalf("2 MiB upload with a length: %v, want 413 body_too_large", err)
	}

	// Chunked, so the length is unknown until the body ends.
	pr, pw := io.Pipe()
	go func() {
		chunk := make([]byte, 64<<10)
		for range 32 {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/envd/files?path=/tmp/big2", pr)
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("X-Access-Token", sandboxAccessToken(t, ctx, d, sb.ID))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("2 MiB chunked upload through the gateway: %d, want 413", resp.StatusCode)
	}
}

// sandboxAccessToken reads a sandbox's agent token through the E2B facade.
func sandboxAccessToken(t *testing.T, ctx context.Context, d *harness.Daemon, id string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/e2b/sandboxes/"+id, nil)
	req.Header.Set("X-API-KEY", d.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || info.EnvdAccessToken == "" {
		t.Fatalf("sandbox info: %v", err)
	}
	return info.EnvdAccessToken
}
