package sandpit_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

func TestVersionAndHealth(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(sandpitBin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "sandpit ") {
		t.Fatalf("version = %q %v", out, err)
	}
	d := harness.Start(t, sandpitBin, harness.Options{})
	resp, err := http.Get(d.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 || body["status"] != "ok" {
		t.Fatalf("health = %d %v %v", resp.StatusCode, body, err)
	}
}

// TestSecondDaemonOnSameDataDirRefuses: two processes would be two writers.
func TestSecondDaemonOnSameDataDirRefuses(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sandpitBin, "serve", "--data-dir", d.DataDir,
		"--listen", "127.0.0.1:0", "--proxy-listen", "127.0.0.1:0", "--token", "x")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("second daemon started on the same data dir:\n%s", out)
	}
	if !strings.Contains(string(out), "locked") || !strings.Contains(string(out), d.DataDir) {
		t.Fatalf("second daemon's message does not say the data dir is locked:\n%s", out)
	}
	// The first one is unharmed.
	if _, _, err := d.Client().List(ctx, client.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestGracefulShutdown: SIGTERM lets an in-flight request finish, then the
// process exits 0 with the store closed (the data dir can be reopened).
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res client.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "sleep 2; echo finished"}})
		done <- result{res, err}
	}()
	time.Sleep(700 * time.Millisecond)
	d.Stop()
	r := <-done
	if r.err != nil || r.res.Stdout != "finished\n" {
		t.Fatalf("in-flight exec across shutdown = %q %v", r.res.Stdout, r.err)
	}
	if !strings.Contains(d.Logs(), "shutting down") {
		t.Fatalf("no clean shutdown in the log:\n%s", d.Logs())
	}
	if _, err := os.Stat(filepath.Join(d.DataDir, "sandpit.db")); err != nil {
		t.Fatal(err)
	}
	// The lock was released: the same data dir serves again, and the
	// sandbox is still there.
	d.Restart(nil)
	if got, err := c.Get(ctx, sb.ID); err != nil || got.State != "running" {
		t.Fatalf("after restart: %v %v", got.State, err)
	}
}

// TestSchemaOnDisk reads the data file with the sqlite3 command-line tool:
// the partial unique indexes exist and the journal is WAL.
func TestSchemaOnDisk(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sqlite3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("sqlite3 missing in CI")
		}
		t.Skip("sqlite3 not installed")
	}
	d := harness.Start(t, sandpitBin, harness.Options{})
	db := filepath.Join(d.DataDir, "sandpit.db")
	st, err := os.Stat(db)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("db mode = %v %v, want 0600", st.Mode().Perm(), err)
	}
	schema, err := exec.Command("sqlite3", db, ".schema").CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3 .schema: %v\n%s", err, schema)
	}
	for _, want := range []string{
		"idx_sandboxes_name", "WHERE name <> ''",
		"idx_exposed_ports_host_port", "WHERE host_port > 0",
		"idx_firecracker_tap_pool_sandbox", "WHERE sandbox_id IS NOT NULL",
		"CREATE TABLE sandbox_custom_domains", "CREATE TABLE request_idempotency",
	} {
		if !strings.Contains(string(schema), want) {
			t.Errorf(".schema lacks %q", want)
		}
	}
	mode, err := exec.Command("sqlite3", db, "PRAGMA journal_mode;").CombinedOutput()
	if err != nil || strings.TrimSpace(string(mode)) != "wal" {
		t.Fatalf("journal_mode = %q %v", mode, err)
	}
}

// TestServeRefusesBadFlags: bad flag values stop the daemon before it
// serves, with a message naming the flag, and leave no data dir behind.
func TestServeRefusesBadFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"port range", []string{"--port-range", "9000-8000"}, "port range"},
		{"domain", []string{"--domain", "not a domain"}, "--domain"},
		{"template", []string{"--template", "noequals"}, "--template"},
		{"log level", []string{"--log-level", "loud"}, "--log-level"},
		{"ttl", []string{"--idempotency-wait", "0s"}, "TTL"},
		{"router", []string{"--router", "nginx"}, "--router"},
		{"tls without caddy", []string{"--preview-tls"}, "--preview-tls needs --router caddy"},
		{"caddy without a proxy port", []string{"--router", "caddy"}, "--proxy-listen"},
		{"caddy admin", []string{"--router", "caddy", "--proxy-listen", "127.0.0.1:7999", "--caddy-admin", "localhost:2019"}, "--caddy-admin"},
		{"oci runtime", []string{"--oci-runtime", "no-such-runtime"}, "--oci-runtime no-such-runtime"},
		{"default above max cpu", []string{"--default-cpu", "4", "--max-cpu", "2"}, "--default-cpu"},
		{"default above max memory", []string{"--default-memory-mb", "4096", "--max-memory-mb", "2048"}, "--default-memory-mb"},
		{"negative quota", []string{"--max-sandboxes", "-1"}, "negative"},
		{"egress", []string{"--sandbox-egress", "some"}, "--sandbox-egress"},
		{"cluster without a key", []string{"--cluster"}, "--cluster-key-file"},
		{"cluster key missing", []string{"--cluster", "--cluster-key-file", "/nonexistent/key"}, "--cluster-key-file"},
		{"failover policy", []string{"--cluster", "--cluster-key-file", "/nonexistent/key", "--failover", "migrate"}, "--failover"},
		{"dead node grace", []string{"--cluster", "--cluster-key-file", "/nonexistent/key", "--dead-node-grace", "0s"}, "--dead-node-grace"},
		{"recreate give-up", []string{"--cluster", "--cluster-key-file", "/nonexistent/key", "--recreate-give-up", "0s"}, "--recreate-give-up"},
		{"failover without cluster", []string{"--failover", "recreate"}, "cluster flags need --cluster"},
		{"recreate give-up without cluster", []string{"--recreate-give-up", "1m"}, "cluster flags need --cluster"},
		{"warm pool", []string{"--warm-pool", "busybox"}, "--warm-pool"},
		{"auto pool size", []string{"--warm-pool-auto-max", "-1"}, "--warm-pool-auto-max"},
		{"auto pool idle", []string{"--warm-pool-idle", "-1s"}, "--warm-pool-idle"},
		{"allow cidr", []string{"--allow-cidr", "10.0.0.0/33"}, "--allow-cidr"},
		{"allow link-local", []string{"--allow-cidr", "169.254.169.254"}, "link-local"},
		{"subnet", []string{"--network-subnet", "fd00::/64"}, "--network-subnet"},
		{"network name", []string{"--network-name", `a "b"`}, "--network-name"},
		{"lsp timeout", []string{"--daytona-lsp-timeout", "-1s"}, "--daytona-lsp-timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--proxy-listen", "127.0.0.1:0", "--token", "x"}, tc.args...)
			out, err := exec.Command(sandpitBin, args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("serve %v = %v\n%s", tc.args, err, out)
			}
			if _, err := os.Stat(filepath.Join(dir, "sandpit.db")); err == nil {
				t.Fatalf("a refused start created a database")
			}
		})
	}
}

// TestServeFailedStartLeavesNothing: a start that fails after the daemon has
// made its sandbox network (Caddy's admin API unreachable) or before it (the
// proxy port taken) exits with an error naming what failed, and undoes what
// it had set up: no network and no firewall chain of its own remains.
func TestServeFailedStartLeavesNothing(t *testing.T) {
	t.Parallel()
	harness.RequireDocker(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Closed when the parallel subtests are done, not when this function
	// returns before them.
	t.Cleanup(func() { taken.Close() })
	// Nothing listens on a port just freed: Caddy's admin API there is
	// unreachable.
	admin := "http://127.0.0.1:" + itoa(testkit.FreePort(t))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"caddy unreachable", []string{"--router", "caddy", "--caddy-admin", admin,
			"--proxy-listen", "127.0.0.1:" + itoa(testkit.FreePort(t))}, "caddy at " + admin},
		{"proxy port taken", []string{"--proxy-listen", taken.Addr().String()}, "proxy listen " + taken.Addr().String()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			network := harness.UniqueNetwork()
			t.Cleanup(func() { harness.Uninstall(t, sandpitBin, network) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append([]string{"serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0", "--token", "x"},
				append(harness.NetworkArgs(network), tc.args...)...)
			out, err := exec.CommandContext(ctx, sandpitBin, args...).CombinedOutput()
			if err == nil || ctx.Err() != nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("serve %v = %v, want an exit naming %q:\n%s", tc.args, err, tc.want, out)
			}
			if err := exec.Command("docker", "network", "inspect", network).Run(); err == nil {
				t.Errorf("network %s remains after the failed start:\n%s", network, out)
			}
			if rules := iptablesRules(t); strings.Contains(rules, "sandpit network "+network) {
				t.Errorf("firewall rules of %s remain after the failed start:\n%s", network, rules)
			}
		})
	}
}
