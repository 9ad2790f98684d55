package sandpit_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// containerIP is a sandbox's address on the test network, as the engine says.
func containerIP(t *testing.T, network, id string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", `{{(index .NetworkSettings.Networks "`+network+`").IPAddress}}`, "sandpit-"+id).Output()
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return strings.TrimSpace(string(out))
}

// pinIP moves a sandbox's container onto ip on the network.
func pinIP(t *testing.T, network, id, ip string) {
	t.Helper()
	if containerIP(t, network, id) == ip {
		return
	}
	if out, err := exec.Command("docker", "network", "disconnect", network, "sandpit-"+id).CombinedOutput(); err != nil {
		t.Fatalf("network disconnect: %v: %s", err, out)
	}
	if out, err := exec.Command("docker", "network", "connect", "--ip", ip, network, "sandpit-"+id).CombinedOutput(); err != nil {
		t.Fatalf("network connect --ip %s: %v: %s", ip, err, out)
	}
}

// reachesB asserts that the victim's old address now serves B, so that the
// stale-route checks below test something.
func reachesB(t *testing.T, ip string) {
	t.Helper()
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + net.JoinHostPort(ip, "3000") + "/")
		if err != nil {
			continue
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) == "B" {
			return
		}
	}
	t.Fatalf("B does not serve on %s:3000 (got %q): the test's premise fails", ip, body)
}

// TestStaleRoute proves that routes follow the container: after A stops or
// is killed behind the daemon's back, a new sandbox B on A's old address,
// listening on A's exposed ports, is reached neither through A's preview URL
// nor through A's TCP forward.
func TestStaleRoute(t *testing.T) {
	// The daemon's own network has a subnet of its pool, so B can be
	// pinned onto A's old address with docker network connect --ip.
	d := harness.Start(t, sandpitBin, harness.Options{})
	network := d.Network
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := d.Client()

	for _, how := range []string{"stop", "docker kill"} {
		t.Run(how, func(t *testing.T) {
			a := newSandbox(t, ctx, c)
			startHTTPD(t, ctx, c, a, 3000, "A")
			startEcho(t, ctx, c, a, 3001)
			web := mustExpose(t, ctx, d, a, 3000, "http", http.StatusCreated)
			fwd := mustExpose(t, ctx, d, a, 3001, "tcp", http.StatusCreated)
			if code, body, err := proxyGet(ctx, d, web.PublicURL); err != nil || code != 200 || body != "A" {
				t.Fatalf("A's preview before: %d %q %v", code, body, err)
			}
			ipA := containerIP(t, network, a)
			d.CheckConsistent(t)

			b := newSandbox(t, ctx, c)
			startHTTPD(t, ctx, c, b, 3000, "B")
			startEcho(t, ctx, c, b, 3001)

			switch how {
			case "stop":
				if _, err := c.Stop(ctx, a); err != nil {
					t.Fatal(err)
				}
			case "docker kill":
				killed := time.Now()
				if out, err := exec.Command("docker", "kill", "sandpit-"+a).CombinedOutput(); err != nil {
					t.Fatalf("docker kill: %v: %s", err, out)
				}
				var sb client.Sandbox
				for {
					var err error
					if sb, err = c.Get(ctx, a); err != nil {
						t.Fatal(err)
					}
					if sb.State == "stopped" || time.Since(killed) > 2*time.Second {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if sb.State != "stopped" || sb.StateReason != "killed" {
					t.Fatalf("2s after docker kill A is %s (reason %q), want stopped (killed)", sb.State, sb.StateReason)
				}
				t.Logf("A shown stopped (killed) %s after docker kill", time.Since(killed).Round(time.Millisecond))
			}
			pinIP(t, network, b, ipA)
			reachesB(t, ipA)

			if code, body, err := proxyGet(ctx, d, web.PublicURL); err == nil && (code != http.StatusNotFound || body == "B") {
				t.Errorf("A's preview after %s answers %d %q, want 404", how, code, body)
			}
			host, _, _ := net.SplitHostPort(d.ProxyAddr)
			if conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(fwd.HostPort)), time.Second); err == nil {
				_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
				_, _ = conn.Write([]byte("ping\n"))
				buf := make([]byte, 16)
				n, _ := conn.Read(buf)
				conn.Close()
				t.Errorf("A's TCP forward after %s accepts a connection (echo %q)", how, buf[:n])
			}
			// B's own routes point at the address it had before the test
			// moved it, so B goes before the check.
			if err := c.Delete(ctx, b); err != nil {
				t.Fatal(err)
			}
			d.CheckConsistent(t)
			if err := c.Delete(ctx, a); err != nil {
				t.Fatal(err)
			}
			d.CheckConsistent(t)
		})
	}
}

func randInt(n int) int {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int(binary.LittleEndian.Uint64(b[:]) % uint64(n))
}

// TestContainerRemovedBehindTheDaemon: a running sandbox's container is
// removed with `docker rm -f`. The daemon hears of it at once, drops the
// sandbox's routes and marks it error (removed); deleting it then works.
func TestContainerRemovedBehindTheDaemon(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := d.Client()
	id := newSandbox(t, ctx, c)
	mustExpose(t, ctx, d, id, 3000, "tcp", http.StatusCreated)
	if out, err := exec.Command("docker", "rm", "-f", "sandpit-"+id).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v: %s", err, out)
	}
	wantState(t, ctx, c, id, "error", "removed")
	d.CheckConsistent(t)
	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	d.CheckConsistent(t)
}

// TestOOMKilledSandbox: the kernel's OOM killer takes the sandbox's main
// process (the test raises its OOM score so that it, not the memory hog, is
// the victim). The sandbox becomes stopped with reason oom, and loses its
// routes.
func TestOOMKilledSandbox(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := d.Client()
	sb, err := c.Create(ctx, client.CreateRequest{MemoryMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	mustExpose(t, ctx, d, sb.ID, 3000, "tcp", http.StatusCreated)
	_, _ = c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo 1000 > /proc/1/oom_score_adj; tail /dev/zero"}, TimeoutS: 60})
	wantState(t, ctx, c, sb.ID, "stopped", "oom")
	d.CheckConsistent(t)
}
