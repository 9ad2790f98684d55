package sandpit_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestResize: PUT /v1/sandboxes/{id}/resources changes a running
// sandbox's limits in the engine and in the sandbox's own cgroup at once,
// keeps them across a stop and start, and a retry changes nothing; out of
// range figures, an owner's per-sandbox cap and its totals are refused with
// nothing changed, and so is a read-only token. The CLI's `sandpit update`
// does the same by name.
func TestResize(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--max-cpu", "2", "--max-memory-mb", "2048"}})
	admin := d.Client()
	ctx := ctxFor(t, 4*time.Minute)

	const owner = "resizer"
	if _, err := admin.SetOwnerLimits(ctx, owner, client.Limits{MaxMemoryMB: 1024, MaxSandboxCPU: 1.5}); err != nil {
		t.Fatal(err)
	}
	c := client.New(d.URL(), tenantToken(t, ctx, d, owner))
	sb, err := c.Create(ctx, client.CreateRequest{Name: "resize-me", CPU: 0.5, MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	cgroupMemory := func() string {
		t.Helper()
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c",
			"cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("read the cgroup's memory limit: %v %+v", err, r)
		}
		return strings.TrimSpace(r.Stdout)
	}
	if got := cgroupMemory(); got != "268435456" {
		t.Fatalf("memory limit inside before the resize: %s, want 256 MiB", got)
	}

	// Twice: the second is a retry and changes nothing.
	for i := 0; i < 2; i++ {
		out, err := c.Resize(ctx, sb.ID, client.Resources{CPU: 1, MemoryMB: 512})
		if err != nil {
			t.Fatalf("resize %d: %v", i, err)
		}
		if out.CPU != 1 || out.MemoryMB != 512 {
			t.Fatalf("resize %d answered cpu %v memory %d, want 1 and 512", i, out.CPU, out.MemoryMB)
		}
	}
	if h := dockerInspectHost(t, ctx, sb.ID); h.NanoCPUs != 1e9 || h.Memory != 512<<20 || h.MemorySwap != 512<<20 {
		t.Fatalf("docker inspect after the resize: %+v, want 1 CPU and 512 MiB without swap", h)
	}
	if got := cgroupMemory(); got != "536870912" {
		t.Fatalf("memory limit inside after the resize: %s, want 512 MiB", got)
	}
	// A field left out keeps what the sandbox has.
	if out, err := c.Resize(ctx, sb.ID, client.Resources{MemoryMB: 384}); err != nil || out.CPU != 1 || out.MemoryMB != 384 {
		t.Fatalf("memory only: %+v %v, want cpu 1 kept and 384 MiB", out, err)
	}

	refused := []struct {
		what string
		body string
		want int
	}{
		{"nothing to change", `{}`, http.StatusBadRequest},
		{"negative cpu", `{"cpu":-1}`, http.StatusBadRequest},
		{"cpu above the daemon's maximum", `{"cpu":3}`, http.StatusBadRequest},
		{"memory below 16 MiB", `{"memory_mb":4}`, http.StatusBadRequest},
		{"memory above the daemon's maximum", `{"memory_mb":4096}`, http.StatusBadRequest},
		{"cpu above the owner's per-sandbox cap", `{"cpu":2}`, http.StatusBadRequest},
		{"an unknown field", `{"cpus":1}`, http.StatusBadRequest},
	}
	for _, r := range refused {
		status, code, msg, err := postJSON(ctx, d, http.MethodPut, "/v1/sandboxes/"+sb.ID+"/resources", r.body, nil)
		if err != nil || status != r.want {
			t.Errorf("%s: %d %s %s %v, want %d", r.what, status, code, msg, err, r.want)
		}
	}
	// The owner's total: another sandbox of 512 MiB leaves room for 512.
	other, err := c.Create(ctx, client.CreateRequest{MemoryMB: 512})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resize(ctx, sb.ID, client.Resources{MemoryMB: 768}); !client.IsCode(err, apitypes.CodeQuotaExceeded) {
		t.Fatalf("resize past the owner's memory total: %v, want quota_exceeded", err)
	}
	if _, err := c.Resize(ctx, sb.ID, client.Resources{MemoryMB: 512}); err != nil {
		t.Fatalf("resize to exactly the owner's total: %v", err)
	}
	if err := c.Delete(ctx, other.ID); err != nil {
		t.Fatal(err)
	}

	// A read-only token may not, and another owner does not see it.
	ro, err := admin.CreateToken(ctx, client.TokenRequest{Name: "resize-ro", Owner: owner, Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(d.URL(), ro.Secret).Resize(ctx, sb.ID, client.Resources{MemoryMB: 256}); !client.IsCode(err, apitypes.CodeForbidden) {
		t.Fatalf("read-only resize: %v, want forbidden", err)
	}
	if _, err := client.New(d.URL(), tenantToken(t, ctx, d, "someone-else")).Resize(ctx, sb.ID, client.Resources{MemoryMB: 256}); !client.IsCode(err, apitypes.CodeNotFound) {
		t.Fatalf("another owner's resize: %v, want not_found", err)
	}
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.CPU != 1 || got.MemoryMB != 512 {
		t.Fatalf("after the refusals: %+v %v, want cpu 1 and 512 MiB unchanged", got, err)
	}

	// Stopped: the engine's container keeps the new figures for the start.
	if _, err := c.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, ctx, d, nil, "update", "--cpu", "0.5", "--memory", "128", "resize-me")
	if code != 0 || strings.TrimSpace(stdout) != sb.ID {
		t.Fatalf("sandpit update: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := c.Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if h := dockerInspectHost(t, ctx, sb.ID); h.NanoCPUs != 5e8 || h.Memory != 128<<20 {
		t.Fatalf("docker inspect after stop, update and start: %+v, want 0.5 CPU and 128 MiB", h)
	}
	if got := cgroupMemory(); got != "134217728" {
		t.Fatalf("memory limit inside after the start: %s, want 128 MiB", got)
	}
}

// TestResizeCrash: a daemon killed after a resize wrote its limits to the
// store and before the engine had them gives the container the stored
// limits when it comes back, and the retried resize answers them.
func TestResizeCrash(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 4*time.Minute)
	sb, err := c.Create(ctx, client.CreateRequest{MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}

	d.Stop()
	d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=after-resize-store"})
	// The daemon dies in the middle: the request gets no answer.
	_, _ = keyed(ctx, d, http.MethodPut, "/v1/sandboxes/"+sb.ID+"/resources", `{"memory_mb":512}`, "resize-1")
	if !d.Wait(60 * time.Second) {
		t.Fatal("daemon did not exit at the crash point")
	}
	if h := dockerInspectHost(t, ctx, sb.ID); h.Memory != 256<<20 {
		t.Fatalf("the engine's limit at the crash: %d, want the old 256 MiB", h.Memory>>20)
	}
	d.Restart(nil)
	testkit.Eventually(t, 60*time.Second, "the stored limit applied", func() error {
		if h := dockerInspectHost(t, ctx, sb.ID); h.Memory != 512<<20 || h.MemorySwap != 512<<20 {
			return fmt.Errorf("engine memory %d MiB, swap %d MiB", h.Memory>>20, h.MemorySwap>>20)
		}
		return nil
	})
	if a := mustKeyed(t, ctx, d, http.MethodPut, "/v1/sandboxes/"+sb.ID+"/resources", `{"memory_mb":512}`, "resize-1"); a.Status != http.StatusOK {
		t.Fatalf("retried resize: %d %s", a.Status, a.Body)
	}
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.MemoryMB != 512 || got.State != "running" {
		t.Fatalf("after the crash: %+v %v, want running with 512 MiB", got, err)
	}
	d.CheckConsistent(t)
}
