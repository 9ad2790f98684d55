// Package harness runs a real sandpit daemon for black-box tests: the binary
// built from this checkout, a t.TempDir() data directory, loopback ports and a
// label on every container it makes, so a test run can clean up after itself
// on an engine it shares with other runs.
package harness

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/agentbin"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
)

// CrashPointsTag is the build tag that compiles the test crash points in
// (internal/crashpoint); the harness builds with it so crash tests can use
// them, and a release build never has them.
const CrashPointsTag = "sandpit_crashpoints"

// Build compiles cmd/sandpit into dir, with the given build tags, and returns
// the binary's path. Call it once from TestMain. Like scripts/build.sh, it
// embeds the small agent (cmd/sandpit-agent, built first into dir) through
// an overlay, so the daemon under test mounts what an installed one does.
func Build(dir string, tags ...string) (string, error) {
	return BuildWithAgent(dir, "./cmd/sandpit-agent", tags...)
}

// BuildWithAgent is Build embedding the agent built from agentPkg (a
// package path, or a directory relative to the module root or absolute):
// a test injects an agent that fails at start with it.
func BuildWithAgent(dir, agentPkg string, tags ...string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	agent := filepath.Join(dir, agentbin.FileName)
	if err := goBuild(root, "-ldflags=-s -w", tags, agent, agentPkg); err != nil {
		return "", err
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(root, "internal", "agentbin", filepath.FromSlash(agentbin.EmbedPath)): agent,
	}})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sandpit")
	return bin, goBuild(root, "-overlay="+ov, tags, bin, "./cmd/sandpit")
}

// BuildWithoutAgent compiles cmd/sandpit as a plain `go build` does, with
// no agent embedded: its sandboxes run the whole executable as agent. The
// agent memory benchmark compares the two.
func BuildWithoutAgent(dir string, tags ...string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sandpit")
	return bin, goBuild(root, "", tags, bin, "./cmd/sandpit")
}

// goBuild runs go build of pkg in the module root, statically linked.
func goBuild(root, flag string, tags []string, out, pkg string) error {
	args := []string{"build", "-o", out}
	if flag != "" {
		args = append(args, flag)
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(mod), nil
}

// RequireDocker skips the test when no engine answers, except in CI
// (CI=true), where a missing engine is a failure.
func RequireDocker(t testing.TB) {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker engine not reachable in CI: %v", err)
		}
		t.Skipf("docker engine not reachable: %v", err)
	}
	if err := exec.Command("docker", "image", "inspect", "sandpit/base:test").Run(); err != nil {
		t.Fatalf("test image sandpit/base:test missing: run scripts/build-test-image.sh")
	}
}

// Options adjust one daemon.
type Options struct {
	Args []string // extra serve flags
	Env  []string // extra environment
	// PortRange overrides the TCP pool ("LO-HI"); by default each daemon
	// gets its own small range so parallel daemons never share ports.
	PortRange string
	// Token, when set, is the admin token instead of a random one (the
	// nodes of a test cluster share one).
	Token string
	// ProxyHost is the address the preview proxy (and the TCP forwards)
	// bind; default 127.0.0.1. Tests that reach the proxy from inside a
	// sandbox bind 0.0.0.0.
	ProxyHost string
	// PortArgs, when set, returns more serve flags before each start
	// attempt, after Args: flags that name ports of their own (a cluster
	// node's gossip and Raft ports), chosen afresh when an attempt found a
	// port taken. A restart reuses the last attempt's.
	PortArgs func() []string
}

// startAttempts is how many times Start tries a daemon whose ports were
// taken between their choice and its bind.
const startAttempts = 4

// NetworkPool is the range test daemons take their sandbox networks from, a
// /24 each: Docker's default pools hold about thirty networks, fewer than
// the daemons that parallel test runs on one engine start.
const NetworkPool = "10.200.0.0/14"

// UniqueNetwork names a sandbox network for one test daemon.
func UniqueNetwork() string { return "sandpit-test-" + randHex(6) }

// NetworkArgs are the serve flags that give a daemon its own network from
// NetworkPool; pass the same name to Uninstall when the test ends.
func NetworkArgs(network string) []string {
	return []string{"--network-name", network, "--network-pool", NetworkPool}
}

// Uninstall removes a test daemon's network and firewall rules. The daemon
// keeps both while sandboxes run (they must stay confined), so call it once
// the daemon and its containers are gone.
func Uninstall(t testing.TB, bin, network string, env ...string) {
	t.Helper()
	cmd := exec.Command(bin, "uninstall", "--network-name", network)
	// env names the engine (DOCKER_HOST) of a daemon on another engine.
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil:
	case strings.Contains(string(out), docker.StaleEndpoints):
		// The engine kept endpoints of containers it removed (a Docker
		// bug, cleared only by restarting dockerd): nothing of the test's
		// is attached, and the network's name is unique to this daemon.
		t.Logf("sandpit uninstall --network-name %s: left to the engine: %s", network, out)
	default:
		t.Errorf("sandpit uninstall --network-name %s: %v\n%s", network, err, out)
	}
}

// Daemon is one running `sandpit serve`.
type Daemon struct {
	t         testing.TB
	bin       string
	opts      Options
	DataDir   string
	Addr      string
	ProxyAddr string
	Token     string
	Label     string // value of the sandpit.run label on its containers
	PortRange string
	// Network is the daemon's own sandbox network, removed (with its
	// firewall rules) when the test ends.
	Network string
	// portArgs are the flags Options.PortArgs gave the last start attempt.
	portArgs []string
	// StartedIn is how long the last start took from the process's start
	// to the first /health answer (within the few milliseconds the wait
	// polls at).
	StartedIn time.Duration

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs *strings.Builder
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// FreeRange finds n consecutive loopback ports that were free a moment ago
// and returns them as "LO-HI", for Options.PortRange: tests of the host-port
// pool need a pool of a size they choose. The ports lie below the kernel's
// ephemeral range, as the default pool does, so that no outgoing connection
// of this machine (the tests make thousands, to the daemon and to Caddy's
// admin API) takes a pool port and lingers on it in TIME_WAIT; and above the
// default pool (22000-23000), which a daemon a developer runs may hold.
func FreeRange(t testing.TB, n int) string {
	t.Helper()
	const base = 23001
	low, _ := ephemeralRange()
	top := low - n
	if top <= base+n {
		top = base + 9000
	}
	for tries := 0; tries < 200; tries++ {
		var b [2]byte
		_, _ = rand.Read(b[:])
		lo := base + (int(b[0])<<8|int(b[1]))%(top-base)
		ok := true
		for p := lo; p < lo+n && ok; p++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return fmt.Sprintf("%d-%d", lo, lo+n-1)
		}
	}
	t.Fatal("no free port range")
	return ""
}

// ephemeralRange is the kernel's ephemeral port range (Linux's default
// when it cannot be read).
func ephemeralRange() (low, high int) {
	low, high = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, errL := strconv.Atoi(f[0])
			h, errH := strconv.Atoi(f[1])
			if errL == nil && errH == nil {
				low, high = l, h
			}
		}
	}
	return low, high
}

// Start runs a daemon and stops it (and removes its containers) when the test
// ends.
func Start(t testing.TB, bin string, opts Options) *Daemon {
	t.Helper()
	RequireDocker(t)
	d := &Daemon{t: t, bin: bin, opts: opts, DataDir: t.TempDir(), Token: "test-" + randHex(8), Label: "t" + randHex(6)}
	if opts.Token != "" {
		d.Token = opts.Token
	}
	d.Network = UniqueNetwork()
	d.PortRange = opts.PortRange
	if d.PortRange == "" {
		d.PortRange = FreeRange(t, 20)
	}
	proxyHost := opts.ProxyHost
	if proxyHost == "" {
		proxyHost = "127.0.0.1"
	}
	t.Cleanup(func() {
		d.Stop()
		RemoveLabelled(d.Label, d.opts.Env...)
		Uninstall(t, d.bin, d.Network, d.opts.Env...)
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.Logs())
		}
	})
	// Ports are chosen free and bound by the daemon a moment later; in
	// between, another process (a parallel test's daemon, an outgoing
	// connection) may take one. Such an attempt is made again on new ports.
	for attempt := 1; ; attempt++ {
		d.Addr = "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
		d.ProxyAddr = net.JoinHostPort(proxyHost, strconv.Itoa(testkit.FreePort(t)))
		if opts.PortArgs != nil {
			d.portArgs = opts.PortArgs()
		}
		err := d.start(nil)
		if err == nil {
			return d
		}
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			t.Fatal(err)
		}
		t.Logf("daemon start attempt %d: %v; again on other ports", attempt, err)
	}
}

// errPortTaken marks a daemon that exited at start because one of its
// ports was taken.
var errPortTaken = errors.New("a port was taken before the daemon bound it")

// Restart starts the daemon (again), with extra environment for this run
// only (crash points), and waits until /health answers.
func (d *Daemon) Restart(env []string) {
	d.t.Helper()
	if err := d.start(env); err != nil {
		d.t.Fatal(err)
	}
}

// start runs the daemon and waits until /health answers; a daemon that
// exits first is an error, errPortTaken when it could not bind a port.
func (d *Daemon) start(env []string) error {
	// The token goes through a file, not the command line, where any user
	// of the machine could read it in the process list.
	tokenFile := filepath.Join(d.DataDir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(d.Token+"\n"), 0o600); err != nil {
		return err
	}
	args := append([]string{"serve", "--data-dir", d.DataDir, "--listen", d.Addr, "--proxy-listen", d.ProxyAddr,
		"--token-file", tokenFile, "--container-label", "sandpit.run=" + d.Label, "--port-range", d.PortRange,
		"--log-level", "debug",
		// The small busybox image: fast to start, and what these tests'
		// commands (httpd, nc) are written for. Options.Args may override.
		"--default-image", "sandpit/base:test",
		// No warm pool sized from demand (on for users): every container a
		// test's daemon holds is one of its sandboxes. The pool's tests turn
		// it on (Options.Args come after and win).
		"--warm-pool-auto=false"}, append(append(NetworkArgs(d.Network), d.opts.Args...), d.portArgs...)...)
	cmd := exec.Command(d.bin, args...)
	cmd.Env = append(append(os.Environ(), d.opts.Env...), env...)
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = nil
	// Every run appends to the one log under d.mu: the reader goroutine
	// writes while Logs reads it, and a restart keeps the earlier runs'
	// lines, which are what explains a failure after a restart.
	d.mu.Lock()
	if d.logs == nil {
		d.logs = &strings.Builder{}
	} else {
		d.logs.WriteString("--- restart ---\n")
	}
	d.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			d.mu.Lock()
			d.logs.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
		}
		_ = cmd.Wait()
		close(done)
	}()
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()
	began := time.Now()
	err := waitHTTP("http://"+d.Addr+"/health", done, 60*time.Second)
	d.StartedIn = time.Since(began)
	if err == nil && !d.answersAsItself() {
		// Another test's daemon took the port between its choice and this
		// daemon's bind and answered /health in its place; this one is
		// exiting with the port in use. Without the check, the test's
		// first call met the other daemon and got its 401.
		select {
		case <-done:
			err = errExited
		case <-time.After(15 * time.Second):
			err = fmt.Errorf("another daemon answers at %s", d.Addr)
		}
	}
	switch {
	case errors.Is(err, errExited) && strings.Contains(d.Logs(), "address already in use"):
		return fmt.Errorf("%w:\n%s", errPortTaken, d.Logs())
	case err != nil:
		return fmt.Errorf("daemon %w:\n%s", err, d.Logs())
	}
	return nil
}

// answersAsItself reports whether the daemon at d.Addr takes d.Token: a
// daemon of another test, whose token is its own, refuses it with a 401.
// Any other answer (or none) is left to the caller's first call.
func (d *Daemon) answersAsItself() bool {
	req, err := http.NewRequest(http.MethodGet, "http://"+d.Addr+"/v1/status", nil)
	if err != nil {
		return true
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return true
	}
	resp.Body.Close()
	return resp.StatusCode != http.StatusUnauthorized
}

// Logs returns what the daemon wrote to stderr.
func (d *Daemon) Logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.logs == nil {
		return ""
	}
	return d.logs.String()
}

// Wait waits for the daemon process to exit on its own (a crash point).
func (d *Daemon) Wait(timeout time.Duration) bool {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Kill sends SIGKILL and waits for the process to go.
func (d *Daemon) Kill() { d.signal(syscall.SIGKILL) }

// Signal sends sig without waiting for anything (SIGSTOP and SIGCONT freeze
// and thaw the daemon).
func (d *Daemon) Signal(sig syscall.Signal) {
	d.mu.Lock()
	cmd := d.cmd
	d.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Stop sends SIGTERM (a clean shutdown) and waits.
func (d *Daemon) Stop() { d.signal(syscall.SIGTERM) }

func (d *Daemon) signal(sig syscall.Signal) {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	stopProcess(cmd, done, sig, 40*time.Second)
}

// Client returns a Go client for the daemon.
func (d *Daemon) Client(opts ...client.Option) *client.Client {
	return client.New(d.Addr, d.Token, opts...)
}

// URL is the daemon's API base URL.
func (d *Daemon) URL() string { return "http://" + d.Addr }

// Containers lists the ids of this daemon's containers carrying extra label
// filters ("sandpit.sandbox-id=...").
func (d *Daemon) Containers(t testing.TB, filters ...string) []string {
	t.Helper()
	args := []string{"ps", "-aq", "--no-trunc", "--filter", "label=sandpit.run=" + d.Label}
	for _, f := range filters {
		args = append(args, "--filter", "label="+f)
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}

// RemoveLabelled force-removes every container of one test run, and the
// images its template builds made (they carry the run's label too). env
// names the engine (DOCKER_HOST) of a daemon on another engine.
func RemoveLabelled(label string, env ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	engine := func(ctx context.Context, args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, "docker", args...)
		c.Env = append(os.Environ(), env...)
		return c
	}
	if out, err := engine(ctx, "ps", "-aq", "--filter", "label=sandpit.run="+label).Output(); err == nil {
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			_ = engine(ctx, append([]string{"rm", "-f"}, ids...)...).Run()
		}
	}
	if out, err := engine(ctx, "images", "-q", "--no-trunc", "--filter", "label=sandpit.run="+label).Output(); err == nil {
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			_ = engine(ctx, append([]string{"rmi", "-f"}, ids...)...).Run()
		}
	}
	// Volumes go after the containers that mounted them.
	if out, err := engine(ctx, "volume", "ls", "-q", "--filter", "label=sandpit.run="+label).Output(); err == nil {
		if names := strings.Fields(string(out)); len(names) > 0 {
			_ = engine(ctx, append([]string{"volume", "rm", "-f"}, names...)...).Run()
		}
	}
}

// Volumes lists the names of this daemon's engine volumes carrying extra
// label filters ("sandpit.volume-id=...").
func (d *Daemon) Volumes(t testing.TB, filters ...string) []string {
	t.Helper()
	args := []string{"volume", "ls", "-q", "--filter", "label=sandpit.run=" + d.Label}
	for _, f := range filters {
		args = append(args, "--filter", "label="+f)
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker volume ls: %v", err)
	}
	return strings.Fields(string(out))
}

// RunWithBinary is a TestMain body: it builds the sandpit binary into a
// temporary directory, stores its path in *bin, runs the tests and removes
// the directory. It returns the exit code for os.Exit.
func RunWithBinary(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "sandpit-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(dir, CrashPointsTag); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Every /v1 exchange of the suite, through the Go client or a raw
	// request, is validated against the OpenAPI document: both use the
	// default transport.
	contract, err := LoadContract()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	http.DefaultTransport = contract.Transport(http.DefaultTransport)
	code := m.Run()
	if vs := contract.Violations(); len(vs) > 0 {
		fmt.Fprintf(os.Stderr, "%d exchanges violated the OpenAPI document:\n", len(vs))
		for _, v := range vs {
			fmt.Fprintln(os.Stderr, "  "+v)
		}
		return 1
	}
	return code
}

// Pid is the daemon process's id (0 when it is not running).
func (d *Daemon) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// RSSKiB reads the daemon's resident set size from /proc.
func (d *Daemon) RSSKiB(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.Pid()))
	if err != nil {
		t.Fatalf("read daemon status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return n
		}
	}
	t.Fatal("no VmRSS in the daemon's status")
	return 0
}

// RequireRuntime skips the test when the Docker engine has no OCI runtime of
// that name registered, except in CI, where .ci/run registers gVisor's runsc
// (scripts/ensure-runsc.sh) and runsc-ckpt (scripts/ensure-runsc-checkpoint.sh)
// and their absence is a failure.
func RequireRuntime(t testing.TB, name string) {
	t.Helper()
	RequireDocker(t)
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
	if err == nil && strings.Contains(string(out), `"`+name+`"`) {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("OCI runtime %s not registered with Docker in CI (%s): %v %s", name, ensureScript(name), err, out)
	}
	t.Skipf("OCI runtime %s not registered with Docker (run %s)", name, ensureScript(name))
}

// ensureScript is the script that registers the runtime name.
func ensureScript(name string) string {
	if name == "runsc-ckpt" {
		return "scripts/ensure-runsc-checkpoint.sh"
	}
	return "scripts/ensure-runsc.sh"
}
