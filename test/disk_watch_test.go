package sandpit_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestDiskLimitWatcher: where the engine cannot enforce a disk quota (this
// machine's overlay2 on ext4), a sandbox that writes past --disk-mb is
// stopped within seconds, with the stopped event and the state reason
// "disk limit exceeded"; another sandbox under the limit runs on; stats
// reports the limit, and status says the watcher enforces it. Scaled for
// CI: a 64 MiB limit and a 150 MiB write.
func TestDiskLimitWatcher(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--disk-mb", "64", "--disk-watch-interval", "1s"}})
	ctx := ctxFor(t, 3*time.Minute)
	c := d.Client()
	st := raw(t, ctx, d, d.Token, http.MethodGet, "/v1/status", "")
	var status struct {
		Disk struct {
			LimitMB int64  `json:"limit_mb"`
			Mode    string `json:"mode"`
		} `json:"disk"`
	}
	if err := json.Unmarshal(st.Body, &status); err != nil || status.Disk.LimitMB != 64 || (status.Disk.Mode != "watcher" && status.Disk.Mode != "quota") {
		t.Fatalf("status disk: %s", st.Body)
	}
	if status.Disk.Mode == "quota" {
		t.Skip("the engine enforces a quota here; the watcher is not used")
	}
	if out := cli(t, ctx, d, "status"); !strings.Contains(out, "watcher") {
		t.Errorf("sandpit status does not say the watcher enforces the limit:\n%s", out)
	}
	hog, quiet := newSandbox(t, ctx, c), newSandbox(t, ctx, c)
	stats, err := c.Stats(ctx, quiet)
	if err != nil || stats.DiskLimitBytes != 64<<20 {
		t.Errorf("stats: %+v %v, want a 64 MiB disk limit", stats, err)
	}
	_, events := openEvents(t, ctx, d, d.Token)
	// The write may be cut short by the stop; its outcome does not matter.
	_, _ = c.Exec(ctx, hog, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "dd if=/dev/zero of=/root/fill bs=1048576 count=150; sleep 30"}, TimeoutS: 60})
	var sb client.Sandbox
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if sb, err = c.Get(ctx, hog); err == nil && sb.State == "stopped" {
			break
		}
	}
	if sb.State != "stopped" || sb.StateReason != "disk limit exceeded" {
		t.Fatalf("the sandbox past its disk limit is %s (reason %q), want stopped for its disk limit", sb.State, sb.StateReason)
	}
	found := false
	for deadline := time.After(10 * time.Second); !found; {
		select {
		case ev := <-events:
			found = ev.Type == "stopped" && ev.SandboxID == hog
		case <-deadline:
			t.Fatal("no stopped event for the sandbox past its disk limit")
		}
	}
	if got, err := c.Get(ctx, quiet); err != nil || got.State != "running" {
		t.Errorf("the sandbox under the limit: %+v %v", got, err)
	}
}
