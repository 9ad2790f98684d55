package sandpit_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// runCLI runs the sandpit CLI against d and returns stdout, stderr and the
// exit code.
func runCLI(t *testing.T, ctx context.Context, d *harness.Daemon, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, sandpitBin, args...)
	cmd.Env = append(os.Environ(), "SANDPIT_ADDR="+d.Addr, "SANDPIT_TOKEN="+d.Token)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sandpit %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func TestCLICreateExecCopyRemove(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)

	out, errOut, code := runCLI(t, ctx, d, nil, "create", "--name", "cli-box", "--env", "WHO=cli", "--label", "via=cli", "--memory", "256")
	if code != 0 {
		t.Fatalf("create exited %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)

	if out, _, _ := runCLI(t, ctx, d, nil, "ls"); !strings.Contains(out, id) || !strings.Contains(out, "cli-box") || !strings.Contains(out, "running") {
		t.Fatalf("ls:\n%s", out)
	}
	if out, errOut, code := runCLI(t, ctx, d, nil, "exec", id, "--", "sh", "-c", "echo $WHO; echo oops >&2; exit 4"); out != "cli\n" || errOut != "oops\n" || code != 4 {
		t.Fatalf("exec = %q %q %d, want the command's output and exit code 4", out, errOut, code)
	}

	// cp both ways, through a file and through stdin/stdout.
	local := filepath.Join(t.TempDir(), "in.bin")
	payload := []byte("binary\x00payload\xff")
	if err := os.WriteFile(local, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "cp", local, id+":/tmp/in.bin"); code != 0 {
		t.Fatalf("cp in: %s", errOut)
	}
	back := filepath.Join(t.TempDir(), "back.bin")
	if _, errOut, code := runCLI(t, ctx, d, nil, "cp", id+":/tmp/in.bin", back); code != 0 {
		t.Fatalf("cp out: %s", errOut)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, payload) {
		t.Fatalf("cp round trip = %q", got)
	}
	if _, errOut, code := runCLI(t, ctx, d, []byte("from stdin"), "cp", "-", id+":/tmp/stdin.txt"); code != 0 {
		t.Fatalf("cp from stdin: %s", errOut)
	}
	if out, _, _ := runCLI(t, ctx, d, nil, "cp", id+":/tmp/stdin.txt", "-"); out != "from stdin" {
		t.Fatalf("cp to stdout = %q", out)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "cp", "a", "b"); code == 0 || !strings.Contains(errOut, "ID:/path") {
		t.Fatalf("cp with no sandbox side: %d %s", code, errOut)
	}

	if out, _, code := runCLI(t, ctx, d, nil, "rm", id); code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("rm = %q %d", out, code)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "rm", id); code == 0 || !strings.Contains(errOut, "no such sandbox: \""+id+"\"") {
		t.Fatalf("rm again = %d %s", code, errOut)
	}
	if got := d.Containers(t); len(got) != 0 {
		t.Fatalf("%d containers after rm", len(got))
	}
}

// TestGeneratedToken: with no --token the daemon generates one into
// <data-dir>/token (mode 0600), never prints it (the log names the file), and
// the CLI finds it there.
func TestGeneratedToken(t *testing.T) {
	t.Parallel()
	harness.RequireDocker(t)
	dataDir := t.TempDir()
	addr := "127.0.0.1:" + itoa(testkit.FreePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	network := harness.UniqueNetwork()
	cmd := exec.CommandContext(ctx, sandpitBin, append([]string{"serve", "--data-dir", dataDir, "--listen", addr,
		"--proxy-listen", "127.0.0.1:" + itoa(testkit.FreePort(t))}, harness.NetworkArgs(network)...)...)
	cmd.Env = os.Environ()
	for i, e := range cmd.Env {
		if strings.HasPrefix(e, "SANDPIT_TOKEN=") {
			cmd.Env[i] = "SANDPIT_TOKEN="
		}
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		harness.Uninstall(t, sandpitBin, network)
	}()

	tokenPath := filepath.Join(dataDir, "token")
	var token string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(tokenPath); err == nil && len(b) > 0 {
			token = strings.TrimSpace(string(b))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if token == "" {
		t.Fatal("no token file written")
	}
	if st, err := os.Stat(tokenPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode = %v %v", st.Mode().Perm(), err)
	}
	c := client.New(addr, token)
	testkit.Eventually(t, 20*time.Second, "", func() error { _, _, err := c.List(ctx, client.ListOptions{}); return err })
	// Never printed (logs travel further than the data dir); the log says
	// where it is.
	if strings.Contains(stderr.String(), token) {
		t.Fatalf("the generated admin token was printed at first start:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), tokenPath) {
		t.Fatalf("the first start's log does not say where the token is stored (%s):\n%s", tokenPath, stderr.String())
	}
	if _, _, err := client.New(addr, "wrong").List(ctx, client.ListOptions{}); !isStatus(err, 401) {
		t.Fatalf("wrong token: %v, want 401", err)
	}
	// The CLI falls back to the data dir's token.
	ls := exec.CommandContext(ctx, sandpitBin, "ls")
	ls.Env = append(os.Environ(), "SANDPIT_ADDR="+addr, "SANDPIT_TOKEN=", "SANDPIT_DATA_DIR="+dataDir)
	if out, err := ls.CombinedOutput(); err != nil || !strings.Contains(string(out), "ID") {
		t.Fatalf("sandpit ls with the data dir's token: %v\n%s", err, out)
	}
}

// TestReconcileStopsContainerOfStoppedSandbox: a container that runs while
// its row says stopped (someone started it behind the daemon's back) is
// stopped again at daemon start.
func TestReconcileStopsContainerOfStoppedSandbox(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	if out, err := run(ctx, t, "docker", "start", "sandpit-"+sb.ID); err != nil {
		t.Fatalf("docker start: %v %s", err, out)
	}
	d.Restart(nil)
	// Reconcile checks sandboxes behind the API, so the container stops
	// shortly after the daemon answers.
	var out string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		out, err = run(ctx, t, "docker", "inspect", "-f", "{{.State.Running}}", "sandpit-"+sb.ID)
		if err == nil && strings.TrimSpace(out) == "false" || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || strings.TrimSpace(out) != "false" {
		t.Fatalf("container running = %q %v, want false", out, err)
	}
	if got, err := c.Get(ctx, sb.ID); err != nil || got.State != "stopped" {
		t.Fatalf("state = %v %v", got.State, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// lockedBuffer is a bytes.Buffer that a running process writes while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
