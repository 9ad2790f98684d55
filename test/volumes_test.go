package sandpit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

func decodeVolume(t *testing.T, a harness.Answer) apitypes.Volume {
	t.Helper()
	var v apitypes.Volume
	if err := json.Unmarshal(a.Body, &v); err != nil || v.ID == "" {
		t.Fatalf("not a volume (%d): %s", a.Status, a.Body)
	}
	return v
}

func volumeCount(t *testing.T, ctx context.Context, d *harness.Daemon, token string) int {
	t.Helper()
	a := raw(t, ctx, d, token, http.MethodGet, "/v1/volumes", "")
	var l apitypes.ListVolumesResponse
	if a.Status != http.StatusOK || json.Unmarshal(a.Body, &l) != nil {
		t.Fatalf("list volumes: %d %s", a.Status, a.Body)
	}
	return len(l.Volumes)
}

func shell(t *testing.T, ctx context.Context, c *client.Client, id, script string) apitypes.ExecResult {
	t.Helper()
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

// TestVolumes covers the native volume API end to end on the real engine:
// idempotent creates (retried, keyed and 20 at once), mounts shared between
// sandboxes, read-only mounts, deletes refused while mounted, owners kept
// apart, and bad input refused before anything is made.
func TestVolumes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 4*time.Minute)

	first := raw(t, ctx, d, d.Token, http.MethodPost, "/v1/volumes", `{"name":"shared"}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", first.Status, first.Body)
	}
	v := decodeVolume(t, first)
	if v.State != "ready" || v.Name != "shared" {
		t.Fatalf("created volume: %+v", v)
	}
	if again := decodeVolume(t, raw(t, ctx, d, d.Token, http.MethodPost, "/v1/volumes", `{"name":"shared"}`)); again.ID != v.ID {
		t.Fatalf("a retried create made %s, not %s", again.ID, v.ID)
	}
	if vols := d.Volumes(t, "sandpit.volume-id="+v.ID); len(vols) != 1 {
		t.Fatalf("engine volumes of %s: %v", v.ID, vols)
	}

	// Twenty concurrent creates of one new name make one volume.
	ids := make([]string, 20)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			a, err := keyed(ctx, d, http.MethodPost, "/v1/volumes", `{"name":"racy"}`)
			if err == nil && (a.Status == http.StatusCreated || a.Status == http.StatusOK) {
				ids[i] = a.ID()
			} else {
				ids[i] = fmt.Sprintf("error %d %s %v", a.Status, a.Body, err)
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || !strings.HasPrefix(id, "vol") {
			t.Fatalf("concurrent creates answered %v", ids)
		}
	}
	if n := volumeCount(t, ctx, d, d.Token); n != 2 {
		t.Fatalf("%d volumes listed, want 2", n)
	}
	// One Idempotency-Key replays its first answer.
	k1 := mustKeyed(t, ctx, d, http.MethodPost, "/v1/volumes", `{"name":"keyed"}`, "vol-key-1")
	k2 := mustKeyed(t, ctx, d, http.MethodPost, "/v1/volumes", `{"name":"keyed"}`, "vol-key-1")
	if k1.ID() == "" || k1.ID() != k2.ID() || !k2.Replayed {
		t.Fatalf("keyed retry: %d %s / %d %s replayed=%v", k1.Status, k1.Body, k2.Status, k2.Body, k2.Replayed)
	}
	if a := raw(t, ctx, d, d.Token, http.MethodDelete, "/v1/volumes/keyed", ""); a.Status != http.StatusNoContent {
		t.Fatalf("delete keyed: %d %s", a.Status, a.Body)
	}

	// Bad input: a clear 4xx and nothing made.
	for _, body := range []string{`{"name":""}`, `{"name":"bad name"}`, `{"name":"-x"}`, `{"nom":"x"}`} {
		if a := raw(t, ctx, d, d.Token, http.MethodPost, "/v1/volumes", body); a.Status != http.StatusBadRequest {
			t.Errorf("create volume %s: %d %s", body, a.Status, a.Body)
		}
	}
	for _, mounts := range []string{
		`[{"volume":"shared","path":"data"}]`,
		`[{"volume":"shared","path":"/"}]`,
		`[{"volume":"shared","path":"/.sandpit"}]`,
		`[{"volume":"shared","path":"/.sandpit/x"}]`,
		`[{"volume":"shared","path":"/proc/x"}]`,
		`[{"volume":"shared","path":"/data/"}]`,
		`[{"volume":"shared","path":"/a/../b"}]`,
		`[{"volume":"shared","path":"/data"},{"volume":"racy","path":"/data"}]`,
		`[{"volume":"","path":"/data"}]`,
		`[{"volume":"nosuch","path":"/data"}]`,
	} {
		a := raw(t, ctx, d, d.Token, http.MethodPost, "/v1/sandboxes", `{"volumes":`+mounts+`}`)
		if a.Status < 400 || a.Status >= 500 {
			t.Errorf("create with %s: %d %s", mounts, a.Status, a.Body)
		}
	}
	if n := sandboxCount(t, ctx, d); n != 0 {
		t.Fatalf("bad creates left %d sandboxes", n)
	}
	if cs := d.Containers(t); len(cs) != 0 {
		t.Fatalf("bad creates left containers %v", cs)
	}

	// Sandbox A writes; sandbox B, mounting the same volume read-only by
	// its id, reads and cannot write.
	a, err := c.Create(ctx, client.CreateRequest{Volumes: []client.VolumeMount{{Volume: "shared", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Volumes) != 1 || a.Volumes[0].Path != "/data" || a.Volumes[0].VolumeID != v.ID || a.Volumes[0].Volume != "shared" {
		t.Fatalf("create answered volumes %+v", a.Volumes)
	}
	if res := shell(t, ctx, c, a.ID, "echo hello from a > /data/note && cat /data/note"); res.ExitCode != 0 || res.Stdout != "hello from a\n" {
		t.Fatalf("write in A: %+v", res)
	}
	b, err := c.Create(ctx, client.CreateRequest{Volumes: []client.VolumeMount{{Volume: v.ID, Path: "/mnt/shared", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if res := shell(t, ctx, c, b.ID, "cat /mnt/shared/note"); res.ExitCode != 0 || res.Stdout != "hello from a\n" {
		t.Fatalf("read in B: %+v", res)
	}
	if res := shell(t, ctx, c, b.ID, "echo no > /mnt/shared/other"); res.ExitCode == 0 {
		t.Fatalf("a read-only mount took a write: %+v", res)
	}
	got, err := c.Get(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Volumes) != 1 || !got.Volumes[0].ReadOnly || got.Volumes[0].Path != "/mnt/shared" {
		t.Fatalf("GET shows volumes %+v", got.Volumes)
	}

	// Mounted (running, then stopped): a delete is refused.
	if a := raw(t, ctx, d, d.Token, http.MethodDelete, "/v1/volumes/shared", ""); a.Status != http.StatusConflict || a.Code() != apitypes.CodeVolumeInUse {
		t.Fatalf("delete of a mounted volume: %d %s", a.Status, a.Body)
	}
	if err := c.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stop(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if a := raw(t, ctx, d, d.Token, http.MethodDelete, "/v1/volumes/"+v.ID, ""); a.Status != http.StatusConflict || a.Code() != apitypes.CodeVolumeInUse {
		t.Fatalf("delete of a volume a stopped sandbox mounts: %d %s", a.Status, a.Body)
	}

	// Another owner neither sees nor mounts the volume, and its own volume
	// of the same name is another volume.
	other := tenantToken(t, ctx, d, "other")
	if n := volumeCount(t, ctx, d, other); n != 0 {
		t.Fatalf("another owner lists %d volumes", n)
	}
	for _, ref := range []string{"shared", v.ID} {
		if a := raw(t, ctx, d, other, http.MethodGet, "/v1/volumes/"+ref, ""); a.Status != http.StatusNotFound {
			t.Fatalf("another owner's GET %s: %d %s", ref, a.Status, a.Body)
		}
		if a := raw(t, ctx, d, other, http.MethodDelete, "/v1/volumes/"+ref, ""); a.Status != http.StatusNotFound {
			t.Fatalf("another owner's DELETE %s: %d %s", ref, a.Status, a.Body)
		}
		if a := raw(t, ctx, d, other, http.MethodPost, "/v1/sandboxes", `{"volumes":[{"volume":"`+ref+`","path":"/data"}]}`); a.Status != http.StatusNotFound {
			t.Fatalf("another owner mounting %s: %d %s", ref, a.Status, a.Body)
		}
	}
	if n := ownerSandboxes(t, ctx, d, other); n != 0 {
		t.Fatalf("another owner's refused creates left %d sandboxes", n)
	}
	mine := decodeVolume(t, raw(t, ctx, d, other, http.MethodPost, "/v1/volumes", `{"name":"shared"}`))
	if mine.ID == v.ID {
		t.Fatal("another owner's volume of the same name is the first owner's")
	}

	// A read-only token may list but not create or delete.
	ro, err := c.CreateToken(ctx, client.TokenRequest{Name: "vol-ro", Owner: "other", Scopes: []string{sandpit.ScopeSandboxesRead}})
	if err != nil {
		t.Fatal(err)
	}
	if a := raw(t, ctx, d, ro.Secret, http.MethodPost, "/v1/volumes", `{"name":"ro"}`); a.Status != http.StatusForbidden {
		t.Fatalf("read-only create: %d %s", a.Status, a.Body)
	}
	if a := raw(t, ctx, d, ro.Secret, http.MethodDelete, "/v1/volumes/shared", ""); a.Status != http.StatusForbidden {
		t.Fatalf("read-only delete: %d %s", a.Status, a.Body)
	}
	if n := volumeCount(t, ctx, d, ro.Secret); n != 1 {
		t.Fatalf("read-only list: %d", n)
	}

	// Unmounted, the volume goes, with its engine volume.
	if err := c.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteVolume(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	if vols := d.Volumes(t, "sandpit.volume-id="+v.ID); len(vols) != 0 {
		t.Fatalf("engine volume left after delete: %v", vols)
	}
	if a := raw(t, ctx, d, d.Token, http.MethodGet, "/v1/volumes/shared", ""); a.Status != http.StatusNotFound {
		t.Fatalf("GET after delete: %d", a.Status)
	}
}

// TestVolumeCrashAndRestart kills the daemon midway through a volume create
// (the engine volume made, the row still creating): the restart leaves no
// half-made volume and the retry makes it whole. A volume and its files then
// survive a SIGKILL of the daemon and a restart.
func TestVolumeCrashAndRestart(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 4*time.Minute)
	for _, point := range []string{"after-volume-row", "after-volume-create"} {
		d.Stop()
		if !d.Wait(30 * time.Second) {
			t.Fatal("daemon did not stop")
		}
		d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=" + point})
		_, _ = keyed(ctx, d, http.MethodPost, "/v1/volumes", `{"name":"crashy"}`, "crash-"+point)
		if !d.Wait(60 * time.Second) {
			t.Fatalf("daemon did not exit at %s", point)
		}
		d.Restart(nil)
		if n := volumeCount(t, ctx, d, d.Token); n != 0 {
			t.Fatalf("%s: %d volumes after the restart, want none half made", point, n)
		}
		if vols := d.Volumes(t); len(vols) != 0 {
			t.Fatalf("%s: engine volumes after the restart: %v", point, vols)
		}
		v := decodeVolume(t, mustKeyed(t, ctx, d, http.MethodPost, "/v1/volumes", `{"name":"crashy"}`, "crash-"+point))
		if v.State != "ready" {
			t.Fatalf("%s: the retry answered %+v", point, v)
		}
		if vols := d.Volumes(t, "sandpit.volume-id="+v.ID); len(vols) != 1 {
			t.Fatalf("%s: engine volumes after the retry: %v", point, vols)
		}
		if err := d.Client().DeleteVolume(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
	}

	c := d.Client()
	if _, err := c.CreateVolume(ctx, "durable"); err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Volumes: []client.VolumeMount{{Volume: "durable", Path: "/keep"}}})
	if err != nil {
		t.Fatal(err)
	}
	shell(t, ctx, c, sb.ID, "echo kept > /keep/file")
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	d.Wait(30 * time.Second)
	d.Restart(nil)
	c = d.Client()
	if v, err := c.Volume(ctx, "durable"); err != nil || v.State != "ready" {
		t.Fatalf("volume after SIGKILL and restart: %+v %v", v, err)
	}
	sb, err = c.Create(ctx, client.CreateRequest{Volumes: []client.VolumeMount{{Volume: "durable", Path: "/keep", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if res := shell(t, ctx, c, sb.ID, "cat /keep/file"); res.Stdout != "kept\n" {
		t.Fatalf("file after restart: %+v", res)
	}
}

// TestCLIVolumes drives `sandpit volume create|ls|rm` and `sandpit create
// --volume NAME:/path[:ro]`.
func TestCLIVolumes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	id := strings.TrimSpace(cli(t, ctx, d, "volume", "create", "clivol"))
	if !strings.HasPrefix(id, "vol") {
		t.Fatalf("volume create printed %q", id)
	}
	if again := strings.TrimSpace(cli(t, ctx, d, "volume", "create", "clivol")); again != id {
		t.Fatalf("a second create printed %q, not %q", again, id)
	}
	if ls := cli(t, ctx, d, "volume", "ls"); !strings.Contains(ls, "clivol") || !strings.Contains(ls, id) || !strings.Contains(ls, "ready") {
		t.Fatalf("volume ls:\n%s", ls)
	}
	sb := strings.TrimSpace(cli(t, ctx, d, "create", "--volume", "clivol:/work"))
	shell(t, ctx, d.Client(), sb, "echo cli > /work/f")
	ro := strings.TrimSpace(cli(t, ctx, d, "create", "--volume", "clivol:/ro:ro"))
	if res := shell(t, ctx, d.Client(), ro, "cat /ro/f && ! touch /ro/g"); res.ExitCode != 0 || res.Stdout != "cli\n" {
		t.Fatalf("read-only mount from the CLI: %+v", res)
	}
	cli(t, ctx, d, "rm", sb, ro)
	cli(t, ctx, d, "volume", "rm", "clivol")
	if n := volumeCount(t, ctx, d, d.Token); n != 0 {
		t.Fatalf("%d volumes after volume rm", n)
	}
}
