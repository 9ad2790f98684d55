package docker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// fakeAgentSource stands in for `sandpit agent`: a static program that
// serves a few endpoints on the agent port so the test can look inside.
const fakeAgentSource = `package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; os.Exit(0) }()

	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	http.HandleFunc("/info", func(w http.ResponseWriter, r *http.Request) {
		cwd, _ := os.Getwd()
		json.NewEncoder(w).Encode(map[string]any{
			"args": os.Args, "pid": os.Getpid(), "uid": os.Getuid(), "cwd": cwd, "env": os.Environ(),
		})
	})
	http.HandleFunc("/sh", func(w http.ResponseWriter, r *http.Request) {
		out, err := exec.Command("/bin/sh", "-c", r.URL.Query().Get("c")).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
			out = append(out, err.Error()...)
		}
		json.NewEncoder(w).Encode(map[string]any{"out": string(out), "code": code})
	})
	http.HandleFunc("/burn", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
		w.Write([]byte("done"))
	})
	if err := http.ListenAndServe(":49983", nil); err != nil {
		panic(err)
	}
}
`

// buildFakeAgent compiles fakeAgentSource into a static binary.
func buildFakeAgent(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fakeagent\n\ngo 1.22\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(fakeAgentSource), 0o644))
	bin := filepath.Join(dir, "sandpit")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fake agent: %v\n%s", err, out)
	}
	return bin
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type fixture struct {
	d     *docker.Docker
	cli   *client.Client // raw engine access, to check what the runtime did
	image string
	agent string
	run   map[string]string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	img := testenv.TestImage(t) // skips (or fails in CI) without an engine
	f := &fixture{image: img, run: testenv.RunLabel(t)}
	ctx := context.Background()
	d, err := docker.New(ctx, docker.Options{})
	must(t, err)
	t.Cleanup(func() { d.Close() })
	f.d = d
	f.cli, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	must(t, err)
	t.Cleanup(func() { f.cli.Close() })
	f.agent = buildFakeAgent(t)
	return f
}

func randomID(t *testing.T) string {
	var b [6]byte
	_, err := rand.Read(b[:])
	must(t, err)
	return "t" + hex.EncodeToString(b[:])
}

func (f *fixture) spec(t *testing.T) driver.Spec {
	return driver.Spec{
		SandboxID:   randomID(t),
		Image:       f.image,
		Env:         map[string]string{"HELLO": "world", "MULTI": "a=b c"},
		Labels:      f.run,
		AgentBinary: f.agent,
		AgentToken:  "secret-token",
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var httpc = &http.Client{Timeout: 3 * time.Second}

// waitHealthy polls the fake agent until it answers.
func waitHealthy(t *testing.T, ip string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := httpc.Get("http://" + net.JoinHostPort(ip, fmt.Sprint(agentapi.Port)) + "/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) == "ok" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent at %s never answered: %v", ip, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func getJSON(t *testing.T, ip, path string, v any) {
	t.Helper()
	resp, err := httpc.Get("http://" + net.JoinHostPort(ip, fmt.Sprint(agentapi.Port)) + path)
	must(t, err)
	defer resp.Body.Close()
	must(t, json.NewDecoder(resp.Body).Decode(v))
}

type shResult struct {
	Out  string `json:"out"`
	Code int    `json:"code"`
}

func sh(t *testing.T, ip, script string) shResult {
	t.Helper()
	var r shResult
	getJSON(t, ip, "/sh?c="+urlQueryEscape(script), &r)
	return r
}

func urlQueryEscape(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", " ", "%20", "#", "%23", "?", "%3F", ";", "%3B", "=", "%3D", "\n", "%0A", "$", "%24").Replace(s)
}

func TestLifecycle(t *testing.T) {
	f := setup(t)
	ctx := ctxT(t)
	spec := f.spec(t)
	spec.CPU = 0.5
	spec.MemoryMB = 64
	spec.Labels = map[string]string{driver.LabelRun: f.run[driver.LabelRun], "team": "blue", driver.LabelSandboxID: "spoofed"}
	spec.Env[agentapi.TokenEnv] = "spoofed"

	id, err := f.d.Create(ctx, spec)
	must(t, err)

	// What the engine got.
	raw, err := f.cli.ContainerInspect(ctx, id)
	must(t, err)
	if raw.Name != "/sandpit-"+spec.SandboxID {
		t.Errorf("name %q", raw.Name)
	}
	wantLabels := map[string]string{
		driver.LabelManaged:   "true",
		driver.LabelSandboxID: spec.SandboxID,
		driver.LabelRun:       f.run[driver.LabelRun],
		"team":                "blue",
	}
	for k, v := range wantLabels {
		if raw.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, raw.Config.Labels[k], v)
		}
	}
	hc := raw.HostConfig
	if hc.Memory != 64<<20 || hc.MemorySwap != 64<<20 {
		t.Errorf("memory %d swap %d", hc.Memory, hc.MemorySwap)
	}
	if hc.NanoCPUs != 5e8 {
		t.Errorf("nanocpus %d", hc.NanoCPUs)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != docker.DefaultPidsLimit {
		t.Errorf("pids limit %v", hc.PidsLimit)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		t.Errorf("security opts %v", hc.SecurityOpt)
	}
	if hc.Privileged {
		t.Error("privileged")
	}
	if hc.Init != nil && *hc.Init {
		t.Error("init enabled")
	}
	for _, c := range []string{"NET_RAW", "MKNOD"} {
		// The engine may report them with the CAP_ prefix.
		if !slices.Contains([]string(hc.CapDrop), c) && !slices.Contains([]string(hc.CapDrop), "CAP_"+c) {
			t.Errorf("cap %s not dropped: %v", c, hc.CapDrop)
		}
	}
	if len(hc.Mounts) != 1 || hc.Mounts[0].Source != f.agent || hc.Mounts[0].Target != docker.AgentPath || !hc.Mounts[0].ReadOnly {
		t.Errorf("mounts %+v", hc.Mounts)
	}
	if !slices.Equal(raw.Config.Entrypoint, []string{docker.AgentPath}) || !slices.Equal(raw.Config.Cmd, []string{"agent"}) {
		t.Errorf("entrypoint %v cmd %v", raw.Config.Entrypoint, raw.Config.Cmd)
	}
	if raw.Config.Tty {
		t.Error("tty")
	}

	c, err := f.d.Inspect(ctx, id)
	must(t, err)
	if c.State != "created" || c.SandboxID != spec.SandboxID || c.Name != "sandpit-"+spec.SandboxID || c.Image != f.image || c.ID != id {
		t.Errorf("inspect before start: %+v", c)
	}
	if time.Since(c.CreatedAt) > time.Minute {
		t.Errorf("created at %v", c.CreatedAt)
	}

	must(t, f.d.Start(ctx, id))
	c, err = f.d.Inspect(ctx, id)
	must(t, err)
	if c.State != "running" || net.ParseIP(c.IP) == nil {
		t.Fatalf("inspect after start: %+v", c)
	}
	waitHealthy(t, c.IP)

	// Inside: PID 1 is the agent, run as `agent`, in /, with the env.
	var info struct {
		Args []string `json:"args"`
		PID  int      `json:"pid"`
		UID  int      `json:"uid"`
		Cwd  string   `json:"cwd"`
		Env  []string `json:"env"`
	}
	getJSON(t, c.IP, "/info", &info)
	if info.PID != 1 || info.UID != 0 || info.Cwd != "/" || !slices.Equal(info.Args, []string{docker.AgentPath, "agent"}) {
		t.Errorf("agent process: %+v", info)
	}
	for _, kv := range []string{"HELLO=world", "MULTI=a=b c", "SANDPIT_AGENT_TOKEN=secret-token"} {
		if !slices.Contains(info.Env, kv) {
			t.Errorf("env lacks %q: %v", kv, info.Env)
		}
	}
	if slices.Contains(info.Env, "SANDPIT_AGENT_TOKEN=spoofed") {
		t.Errorf("spec.Env overrode the token: %v", info.Env)
	}

	// A root shell works with the dropped capabilities; the agent is read-only.
	for script, want := range map[string]string{
		"id -u":                            "0\n",
		"echo hi > /root/f && cat /root/f": "hi\n",
		"touch /tmp/x && chown 1000:1000 /tmp/x && stat -c %u /tmp/x": "1000\n",
		"su user -s /bin/sh -c 'id -u'":                               "1000\n",
		"bash -c 'echo $BASH_VERSION' | cut -c1":                      "5\n",
	} {
		if r := sh(t, c.IP, script); r.Code != 0 || r.Out != want {
			t.Errorf("%s: code %d out %q, want %q", script, r.Code, r.Out, want)
		}
	}
	if r := sh(t, c.IP, "echo x > "+docker.AgentPath); r.Code == 0 {
		t.Errorf("agent binary writable: %+v", r)
	}
	if r := sh(t, c.IP, "mknod /tmp/null c 1 3"); r.Code == 0 {
		t.Errorf("mknod allowed: %+v", r)
	}

	// Stats: the CPU limit is half a core; burn it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + net.JoinHostPort(c.IP, "49983") + "/burn?d=3s")
		if err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(500 * time.Millisecond)
	st, err := f.d.Stats(ctx, id)
	must(t, err)
	<-done
	t.Logf("stats: %+v", st)
	// The burn shows, within the half-core limit (the share it gets
	// depends on what else the machine runs, so only its presence counts).
	if st.CPUCount != 1 || st.CPUUsedPct < 5 || st.CPUUsedPct > 100 {
		t.Errorf("cpu: count %d used %.1f%%", st.CPUCount, st.CPUUsedPct)
	}
	if st.MemTotal != 64<<20 || st.MemUsed <= 0 || st.MemUsed > st.MemTotal {
		t.Errorf("memory: %d / %d", st.MemUsed, st.MemTotal)
	}
	if time.Since(st.Timestamp) > time.Minute {
		t.Errorf("timestamp %v", st.Timestamp)
	}

	// List by label.
	list, err := f.d.List(ctx, map[string]string{driver.LabelRun: f.run[driver.LabelRun], "team": "blue"})
	must(t, err)
	if len(list) != 1 || list[0].ID != id || list[0].SandboxID != spec.SandboxID || list[0].State != "running" ||
		list[0].IP != c.IP || list[0].Name != c.Name || list[0].Labels["team"] != "blue" {
		t.Errorf("list: %+v", list)
	}
	list, err = f.d.List(ctx, map[string]string{driver.LabelRun: f.run[driver.LabelRun], "team": "red"})
	must(t, err)
	if len(list) != 0 {
		t.Errorf("list team=red: %+v", list)
	}

	// Pause freezes the agent; unpause brings it back.
	must(t, f.d.Pause(ctx, id))
	c, err = f.d.Inspect(ctx, id)
	must(t, err)
	if c.State != "paused" {
		t.Errorf("state after pause %q", c.State)
	}
	if _, err := (&http.Client{Timeout: 500 * time.Millisecond}).Get("http://" + net.JoinHostPort(c.IP, "49983") + "/health"); err == nil {
		t.Error("paused agent answered")
	}
	must(t, f.d.Unpause(ctx, id))
	waitHealthy(t, c.IP)

	// Stop, stop again, start again.
	must(t, f.d.Stop(ctx, id, 5*time.Second))
	c, err = f.d.Inspect(ctx, id)
	must(t, err)
	if c.State != "exited" {
		t.Errorf("state after stop %q", c.State)
	}
	must(t, f.d.Stop(ctx, id, time.Second))
	if _, err := f.d.Stats(ctx, id); err != nil {
		t.Errorf("stats of a stopped container: %v", err)
	}
	must(t, f.d.Start(ctx, id))
	c, err = f.d.Inspect(ctx, id)
	must(t, err)
	waitHealthy(t, c.IP)

	// A paused container can be stopped.
	must(t, f.d.Pause(ctx, id))
	must(t, f.d.Stop(ctx, id, time.Second))
	c, err = f.d.Inspect(ctx, id)
	must(t, err)
	if c.State != "exited" {
		t.Errorf("state after stopping a paused container %q", c.State)
	}

	// Remove; then everything says not found, and removing again is fine.
	must(t, f.d.Remove(ctx, id))
	must(t, f.d.Remove(ctx, id))
	if _, err := f.d.Inspect(ctx, id); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("inspect removed: %v", err)
	}
	for name, op := range map[string]func(context.Context, string) error{
		"start": f.d.Start, "pause": f.d.Pause, "unpause": f.d.Unpause,
		"stop":  func(ctx context.Context, id string) error { return f.d.Stop(ctx, id, time.Second) },
		"stats": func(ctx context.Context, id string) error { _, err := f.d.Stats(ctx, id); return err },
	} {
		if err := op(ctx, id); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("%s removed: %v", name, err)
		}
	}
	list, err = f.d.List(ctx, f.run)
	must(t, err)
	if len(list) != 0 {
		t.Errorf("list after remove: %+v", list)
	}
}

func TestImageNotFound(t *testing.T) {
	f := setup(t)
	ctx := ctxT(t)
	spec := f.spec(t)
	spec.Image = "sandpit/does-not-exist:" + randomID(t)
	_, err := f.d.Create(ctx, spec)
	if !errors.Is(err, driver.ErrImageNotFound) {
		t.Fatalf("err = %v, want ErrImageNotFound", err)
	}
	list, err := f.d.List(ctx, f.run)
	must(t, err)
	if len(list) != 0 {
		t.Errorf("left behind: %+v", list)
	}
}

func TestInvalidSpec(t *testing.T) {
	f := setup(t)
	ctx := ctxT(t)
	for name, mutate := range map[string]func(*driver.Spec){
		"missing agent":   func(s *driver.Spec) { s.AgentBinary = filepath.Join(t.TempDir(), "nope") },
		"relative agent":  func(s *driver.Spec) { s.AgentBinary = "sandpit" },
		"negative memory": func(s *driver.Spec) { s.MemoryMB = -1 },
		"negative cpu":    func(s *driver.Spec) { s.CPU = -1 },
		"no image":        func(s *driver.Spec) { s.Image = "" },
		"no id":           func(s *driver.Spec) { s.SandboxID = "" },
		"bad env":         func(s *driver.Spec) { s.Env = map[string]string{"A=B": "c"} },
	} {
		spec := f.spec(t)
		mutate(&spec)
		id, err := f.d.Create(ctx, spec)
		t.Logf("%s: %v", name, err)
		if err == nil {
			t.Errorf("%s: created %s", name, id)
		} else if errors.Is(err, driver.ErrImageNotFound) {
			t.Errorf("%s: %v", name, err)
		}
	}
	list, err := f.d.List(ctx, f.run)
	must(t, err)
	if len(list) != 0 {
		t.Errorf("left behind: %+v", list)
	}
}

// An image with its own ENTRYPOINT, USER and WORKDIR still runs the agent,
// as root, in the image's working directory.
func TestImageWithEntrypoint(t *testing.T) {
	f := setup(t)
	ctx := ctxT(t)

	base, err := f.cli.ContainerCreate(ctx, &container.Config{Image: f.image, Labels: f.run}, nil, nil, nil, "")
	must(t, err)
	ref := "sandpit/entrypoint-test:" + f.run[driver.LabelRun]
	_, err = f.cli.ContainerCommit(ctx, base.ID, container.CommitOptions{
		Reference: ref,
		Changes:   []string{`ENTRYPOINT ["/bin/false"]`, `CMD ["nope"]`, "USER 1000", "WORKDIR /home/user"},
	})
	must(t, err)
	t.Cleanup(func() {
		testenv.CleanupRun(t, f.run[driver.LabelRun]) // containers first, or the image stays behind
		if _, err := f.cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true}); err != nil {
			t.Errorf("remove image %s: %v", ref, err)
		}
	})

	spec := f.spec(t)
	spec.Image = ref
	spec.PidsLimit = 40
	id, err := f.d.Create(ctx, spec)
	must(t, err)
	must(t, f.d.Start(ctx, id))
	c, err := f.d.Inspect(ctx, id)
	must(t, err)
	waitHealthy(t, c.IP)
	var info struct {
		UID int    `json:"uid"`
		Cwd string `json:"cwd"`
	}
	getJSON(t, c.IP, "/info", &info)
	if info.UID != 0 || info.Cwd != "/home/user" {
		t.Errorf("agent runs as %d in %q", info.UID, info.Cwd)
	}

	// The pids limit holds: 60 sleepers cannot all start.
	r := sh(t, c.IP, "for i in $(seq 60); do sleep 30 </dev/null >/dev/null 2>&1 & done; echo started")
	t.Logf("pids: %+v", r)
	if !strings.Contains(r.Out, "can't fork") && !strings.Contains(r.Out, "Resource temporarily unavailable") && r.Code == 0 {
		t.Errorf("pids limit 40 not enforced: %+v", r)
	}
	raw, err := f.cli.ContainerInspect(ctx, id)
	must(t, err)
	if raw.HostConfig.PidsLimit == nil || *raw.HostConfig.PidsLimit != 40 {
		t.Errorf("pids limit %v", raw.HostConfig.PidsLimit)
	}
	must(t, f.d.Remove(ctx, id))
}

func TestNewOptions(t *testing.T) {
	testenv.RequireDocker(t)
	d, err := docker.New(context.Background(), docker.Options{Network: "bridge"})
	must(t, err)
	defer d.Close()
	must(t, d.Ping(context.Background()))
}

// A second container for the same sandbox id is refused (the name is taken)
// and the first survives; a container can be addressed by its name.
func TestDuplicateSandboxID(t *testing.T) {
	f := setup(t)
	ctx := ctxT(t)
	spec := f.spec(t)
	id, err := f.d.Create(ctx, spec)
	must(t, err)
	if id2, err := f.d.Create(ctx, spec); err == nil {
		t.Fatalf("second create gave %s", id2)
	} else {
		t.Logf("second create: %v", err)
	}
	c, err := f.d.Inspect(ctx, docker.ContainerName(spec.SandboxID))
	must(t, err)
	if c.ID != id || c.State != "created" {
		t.Errorf("by name: %+v", c)
	}
	if st, err := f.d.Stats(ctx, id); err != nil {
		t.Errorf("stats of a created container: %v", err)
	} else {
		t.Logf("stats of a created container: %+v", st)
	}
}
