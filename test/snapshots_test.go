package sandpit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// catFile reads a file in a sandbox; "" when it is missing.
func catFile(t *testing.T, ctx context.Context, c *client.Client, id, path string) string {
	t.Helper()
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "cat " + path + " 2>/dev/null || true"}})
	if err != nil {
		t.Fatalf("cat %s in %s: %v", path, id, err)
	}
	return res.Stdout
}

func writeFile(t *testing.T, ctx context.Context, c *client.Client, id, path, content string) {
	t.Helper()
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "printf %s '" + content + "' > " + path}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("write %s in %s: %+v %v", path, id, res, err)
	}
}

func decodeTemplate(t *testing.T, a harness.Answer) apitypes.Template {
	t.Helper()
	var out apitypes.Template
	if err := json.Unmarshal(a.Body, &out); err != nil || out.ID == "" {
		t.Fatalf("decode snapshot %d %s: %v", a.Status, a.Body, err)
	}
	return out
}

// snapshotImages lists the snapshot images of one test daemon: other tests
// beside it take snapshots of their own at the same time.
func snapshotImages(t *testing.T, d *harness.Daemon) []string {
	t.Helper()
	out, err := exec.Command("docker", "images", "--filter", "label=sandpit.run="+d.Label, "--format", "{{.Repository}}:{{.Tag}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	var imgs []string
	for _, ref := range strings.Fields(string(out)) {
		if strings.Contains(ref, ":snap-") {
			imgs = append(imgs, ref)
		}
	}
	return imgs
}

// TestSnapshotNative: a snapshot keeps a sandbox's files; twenty identical
// keyed requests racing make one snapshot; two sandboxes created from it see
// the file and diverge; listings filter by sandbox and name; a snapshot a
// sandbox runs from cannot be deleted, and goes with its image once none
// does; bad input is refused with nothing made.
func TestSnapshotNative(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 4*time.Minute)
	c := d.Client()
	src, err := c.Create(ctx, client.CreateRequest{Labels: map[string]string{"role": "source"}})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, c, src.ID, "/root/state.txt", "kept")

	// Bad input makes nothing.
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/v1/sandboxes/" + src.ID + "/snapshots", `{"name":"Bad Name!"}`, http.StatusBadRequest},
		{"/v1/sandboxes/" + src.ID + "/snapshots", `{"nmae":"typo"}`, http.StatusBadRequest},
		{"/v1/sandboxes/sbnosuchsandbox/snapshots", `{}`, http.StatusNotFound},
	} {
		if a := mustKeyed(t, ctx, d, http.MethodPost, tc.path, tc.body); a.Status != tc.status {
			t.Errorf("POST %s %s: %d %s, want %d", tc.path, tc.body, a.Status, a.Body, tc.status)
		}
	}
	if ss, err := c.ListSnapshots(ctx, "", ""); err != nil || len(ss) != 0 {
		t.Fatalf("snapshots after refused requests: %v %v", ss, err)
	}

	// Twenty identical keyed requests at once: one snapshot, one answer.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers []harness.Answer
	)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := keyed(ctx, d, http.MethodPost, "/v1/sandboxes/"+src.ID+"/snapshots", `{"name":"golden"}`, "snap-once")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
		}()
	}
	wg.Wait()
	ids := map[string]bool{}
	for _, a := range answers {
		if a.Status != http.StatusCreated {
			t.Fatalf("keyed snapshot: %d %s", a.Status, a.Body)
		}
		ids[decodeTemplate(t, a).ID] = true
	}
	if len(ids) != 1 {
		t.Fatalf("20 keyed requests made %d snapshots", len(ids))
	}
	ss, err := c.ListSnapshots(ctx, "", "")
	if err != nil || len(ss) != 1 || ss[0].Name != "golden" || ss[0].Kind != "snapshot" || ss[0].SourceSandbox != src.ID {
		t.Fatalf("snapshots: %+v %v", ss, err)
	}
	snap := ss[0]

	// An anonymous snapshot of another sandbox, to filter against.
	other, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	anon, err := c.Snapshot(ctx, other.ID, client.SnapshotRequest{})
	if err != nil || anon.Name != "" {
		t.Fatalf("anonymous snapshot: %+v %v", anon, err)
	}
	for _, tc := range []struct {
		sandbox, name string
		want          []string
	}{
		{"", "", []string{snap.ID, anon.ID}},
		{src.ID, "", []string{snap.ID}},
		{other.ID, "", []string{anon.ID}},
		{"", "golden", []string{snap.ID}},
		{"", "golden:default", []string{snap.ID}},
		{"", "nothing", nil},
	} {
		got, err := c.ListSnapshots(ctx, tc.sandbox, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, s := range got {
			gotIDs = append(gotIDs, s.ID)
		}
		sort.Strings(gotIDs)
		sort.Strings(tc.want)
		if fmt.Sprint(gotIDs) != fmt.Sprint(tc.want) {
			t.Errorf("snapshots of sandbox %q name %q: %v, want %v", tc.sandbox, tc.name, gotIDs, tc.want)
		}
	}

	// Two sandboxes from the snapshot see the file, by name and by id, and
	// what one writes the other does not see.
	a, err := c.Create(ctx, client.CreateRequest{Template: "golden"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Create(ctx, client.CreateRequest{Template: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if got := catFile(t, ctx, c, id, "/root/state.txt"); got != "kept" {
			t.Fatalf("sandbox %s from the snapshot reads %q", id, got)
		}
	}
	writeFile(t, ctx, c, a.ID, "/root/state.txt", "changed")
	if got := catFile(t, ctx, c, b.ID, "/root/state.txt"); got != "kept" {
		t.Fatalf("a write in one copy shows in another: %q", got)
	}
	if got := catFile(t, ctx, c, src.ID, "/root/state.txt"); got != "kept" {
		t.Fatalf("a write in a copy shows in the source: %q", got)
	}

	// In use: refused, through both delete routes; then deleted with its image.
	for _, p := range []string{"/v1/snapshots/golden", "/v1/templates/golden"} {
		if a := mustKeyed(t, ctx, d, http.MethodDelete, p, ""); a.Status != http.StatusConflict || !strings.Contains(string(a.Body), "in_use") {
			t.Fatalf("DELETE %s while sandboxes run from it: %d %s", p, a.Status, a.Body)
		}
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := c.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	image := snap.Image
	if err := c.DeleteSnapshot(ctx, "golden"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetTemplate(ctx, snap.ID); !client.IsCode(err, apitypes.CodeNotFound) {
		t.Fatalf("deleted snapshot: %v", err)
	}
	for _, img := range snapshotImages(t, d) {
		if img == image {
			t.Fatalf("the deleted snapshot's image %s is still there", image)
		}
	}
	// A template that is not a snapshot is not one through /v1/snapshots.
	if a := mustKeyed(t, ctx, d, http.MethodGet, "/v1/snapshots/base", ""); a.Status != http.StatusNotFound {
		t.Fatalf("GET /v1/snapshots/base: %d", a.Status)
	}
	d.CheckConsistent(t)
}

type forkAnswer struct {
	Forks []apitypes.ForkResult `json:"forks"`
}

func forkIDs(t *testing.T, a harness.Answer) []string {
	t.Helper()
	var out forkAnswer
	if err := json.Unmarshal(a.Body, &out); err != nil || a.Status != http.StatusCreated {
		t.Fatalf("fork: %d %s %v", a.Status, a.Body, err)
	}
	var ids []string
	for _, f := range out.Forks {
		if f.Error != nil || f.Sandbox == nil {
			t.Fatalf("a fork failed: %+v", f.Error)
		}
		ids = append(ids, f.Sandbox.ID)
	}
	return ids
}

// TestForkNative: a fork of three copies has the parent's files, keeps the
// parent running, and its copies diverge; the keyed retry answers with the
// same copies, an unkeyed second fork makes new ones; a bad count or a gone
// parent is refused with nothing made; the fork's base snapshot is listed
// nowhere.
func TestForkNative(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 4*time.Minute)
	c := d.Client()
	parent, err := c.Create(ctx, client.CreateRequest{Env: map[string]string{"FROM_PARENT": "yes"}, Labels: map[string]string{"team": "forks"}})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, c, parent.ID, "/root/parent.txt", "p")

	for _, body := range []string{`{"count":-1}`, `{"count":21}`, `{"count":2,"name":"two"}`, `{"timeout_s":-5}`} {
		if a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/"+parent.ID+"/fork", body); a.Status != http.StatusBadRequest {
			t.Errorf("fork %s: %d %s", body, a.Status, a.Body)
		}
	}
	if a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/sbnosuch/fork", `{"count":1}`); a.Status != http.StatusNotFound {
		t.Errorf("fork of a missing sandbox: %d %s", a.Status, a.Body)
	}
	if list, _, err := c.List(ctx, client.ListOptions{}); err != nil || len(list) != 1 {
		t.Fatalf("sandboxes after refused forks: %d %v", len(list), err)
	}

	first := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/"+parent.ID+"/fork", `{"count":3}`, "fork-once")
	ids := forkIDs(t, first)
	if len(ids) != 3 {
		t.Fatalf("fork of 3 made %d", len(ids))
	}
	retry := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/"+parent.ID+"/fork", `{"count":3}`, "fork-once")
	if got := forkIDs(t, retry); fmt.Sprint(got) != fmt.Sprint(ids) || !retry.Replayed {
		t.Fatalf("the keyed retry answered %v (replayed %v), want %v", got, retry.Replayed, ids)
	}
	for i, id := range ids {
		if got := catFile(t, ctx, c, id, "/root/parent.txt"); got != "p" {
			t.Fatalf("fork %s reads %q", id, got)
		}
		res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $FROM_PARENT"}})
		if err != nil || res.Stdout != "yes\n" {
			t.Fatalf("fork %s env: %q %v", id, res.Stdout, err)
		}
		sb, err := c.Get(ctx, id)
		if err != nil || sb.State != "running" || sb.Labels["team"] != "forks" {
			t.Fatalf("fork %s: %+v %v", id, sb, err)
		}
		writeFile(t, ctx, c, id, "/root/own.txt", fmt.Sprint(i))
	}
	for i, id := range ids {
		if got := catFile(t, ctx, c, id, "/root/own.txt"); got != fmt.Sprint(i) {
			t.Fatalf("fork %s sees %q, its own write was %d", id, got, i)
		}
	}
	if got := catFile(t, ctx, c, parent.ID, "/root/own.txt"); got != "" {
		t.Fatalf("a fork's write shows in the parent: %q", got)
	}
	if sb, err := c.Get(ctx, parent.ID); err != nil || sb.State != "running" {
		t.Fatalf("parent after the fork: %+v %v", sb, err)
	}

	// Unkeyed: a second fork is a second set.
	again, err := c.Fork(ctx, parent.ID, client.ForkRequest{Count: 1, Name: "named-fork"})
	if err != nil || len(again) != 1 || again[0].Sandbox == nil || again[0].Sandbox.Name != "named-fork" {
		t.Fatalf("second fork: %+v %v", again, err)
	}
	for _, id := range ids {
		if again[0].Sandbox.ID == id {
			t.Fatalf("a second fork reused copy %s", id)
		}
	}
	// The bases are nobody's templates or snapshots.
	if ts, err := c.ListTemplates(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("templates after forks: %+v %v", ts, err)
	}
	if ss, err := c.ListSnapshots(ctx, "", ""); err != nil || len(ss) != 0 {
		t.Fatalf("snapshots after forks: %+v %v", ss, err)
	}
	d.CheckConsistent(t)
}

// TestSnapshotCrashAfterCommit: a daemon killed after the engine committed a
// snapshot's image and before the store knew leaves no snapshot and no
// image after its restart, and the retry of the keyed request makes the
// snapshot under the same id.
func TestSnapshotCrashAfterCommit(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	src, err := d.Client().Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, d.Client(), src.ID, "/root/crash.txt", "survives")
	d.Stop()
	d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=after-snapshot-commit"})
	before := len(snapshotImages(t, d))
	body := `{"name":"crashy"}`
	if _, err := keyed(ctx, d, http.MethodPost, "/v1/sandboxes/"+src.ID+"/snapshots", body, "crash-snap"); err == nil {
		t.Log("the crashing request answered")
	}
	if !d.Wait(60 * time.Second) {
		t.Fatal("daemon did not exit at the crash point")
	}
	d.Restart(nil)
	if ss, err := d.Client().ListSnapshots(ctx, "", ""); err != nil || len(ss) != 0 {
		t.Fatalf("snapshots after the crash: %+v %v", ss, err)
	}
	if n := len(snapshotImages(t, d)); n > before {
		t.Fatalf("%d snapshot images after the restart, %d before the crash", n, before)
	}
	a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/"+src.ID+"/snapshots", body, "crash-snap")
	if a.Status != http.StatusCreated {
		t.Fatalf("retry: %d %s", a.Status, a.Body)
	}
	snap := decodeTemplate(t, a)
	sb, err := d.Client().Create(ctx, client.CreateRequest{Template: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := catFile(t, ctx, d.Client(), sb.ID, "/root/crash.txt"); got != "survives" {
		t.Fatalf("sandbox from the retried snapshot reads %q", got)
	}
	d.CheckConsistent(t)
}

// TestSnapshotSurvivesDaemonKill: a snapshot outlives a SIGKILL of the daemon
// and sandboxes are created from it after the restart.
func TestSnapshotSurvivesDaemonKill(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	c := d.Client()
	src, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, c, src.ID, "/root/k.txt", "k")
	snap, err := c.Snapshot(ctx, src.ID, client.SnapshotRequest{Name: "durable"})
	if err != nil {
		t.Fatal(err)
	}
	d.Kill()
	d.Wait(30 * time.Second)
	d.Restart(nil)
	c = d.Client()
	if got, err := c.ListSnapshots(ctx, "", "durable"); err != nil || len(got) != 1 || got[0].ID != snap.ID {
		t.Fatalf("snapshots after SIGKILL: %+v %v", got, err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Template: "durable"})
	if err != nil {
		t.Fatal(err)
	}
	if got := catFile(t, ctx, c, sb.ID, "/root/k.txt"); got != "k" {
		t.Fatalf("after SIGKILL the snapshot gives %q", got)
	}
}

// TestSnapshotOwners: another owner neither sees, creates from, deletes nor
// forks what one owner has; each owner's names are its own; a read-only
// token may list snapshots but not take or fork.
func TestSnapshotOwners(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	admin := d.Client()
	tokens, ro := ownerTokens(t, ctx, admin, "alice", "bob")
	alice, bob := client.New(d.Addr, tokens["alice"]), client.New(d.Addr, tokens["bob"])
	sb, err := alice.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := alice.Snapshot(ctx, sb.ID, client.SnapshotRequest{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token, method, path, body string
		status                    int
	}{
		{tokens["bob"], http.MethodGet, "/v1/snapshots/" + snap.ID, "", http.StatusNotFound},
		{tokens["bob"], http.MethodDelete, "/v1/snapshots/" + snap.ID, "", http.StatusNotFound},
		{tokens["bob"], http.MethodPost, "/v1/sandboxes/" + sb.ID + "/snapshots", "{}", http.StatusNotFound},
		{tokens["bob"], http.MethodPost, "/v1/sandboxes/" + sb.ID + "/fork", "{}", http.StatusNotFound},
		{tokens["bob"], http.MethodPost, "/v1/sandboxes", `{"template":"` + snap.ID + `"}`, http.StatusBadRequest},
		{ro.Secret, http.MethodPost, "/v1/sandboxes/" + sb.ID + "/snapshots", "{}", http.StatusForbidden},
		{ro.Secret, http.MethodPost, "/v1/sandboxes/" + sb.ID + "/fork", "{}", http.StatusForbidden},
		{ro.Secret, http.MethodGet, "/v1/snapshots", "", http.StatusOK},
	} {
		if a := raw(t, ctx, d, tc.token, tc.method, tc.path, tc.body); a.Status != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, a.Status, a.Body, tc.status)
		}
	}
	if ss, err := bob.ListSnapshots(ctx, "", ""); err != nil || len(ss) != 0 {
		t.Fatalf("bob sees snapshots: %+v %v", ss, err)
	}
	// Bob's own snapshot of the same name is his, not a build of alice's.
	bsb, err := bob.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if bs, err := bob.Snapshot(ctx, bsb.ID, client.SnapshotRequest{Name: "mine"}); err != nil || bs.ID == snap.ID {
		t.Fatalf("bob's snapshot named mine: %+v %v", bs, err)
	}
	if ss, err := alice.ListSnapshots(ctx, "", "mine"); err != nil || len(ss) != 1 || ss[0].ID != snap.ID {
		t.Fatalf("alice's snapshots after bob's: %+v %v", ss, err)
	}
}

// ownerTokens makes a read-write token for each owner, and a read-only one
// for the first.
func ownerTokens(t *testing.T, ctx context.Context, admin *client.Client, owners ...string) (map[string]string, client.Token) {
	t.Helper()
	tokens := map[string]string{}
	for _, o := range owners {
		tok, err := admin.CreateToken(ctx, client.TokenRequest{Name: o + "-rw", Owner: o})
		if err != nil {
			t.Fatal(err)
		}
		tokens[o] = tok.Secret
	}
	ro, err := admin.CreateToken(ctx, client.TokenRequest{Name: owners[0] + "-ro", Owner: owners[0], Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	return tokens, ro
}

// TestForkCrashMidway: a daemon killed while a keyed fork makes its copies
// (after the engine created the first copy's container) leaves, after its
// restart, no half-made copy; the retry of the request makes the copies
// under the ids the first attempt chose, so there is one set, not two.
func TestForkCrashMidway(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	parent, err := d.Client().Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ctx, d.Client(), parent.ID, "/root/p.txt", "p")
	d.Stop()
	d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=after-container-create"})
	path := "/v1/sandboxes/" + parent.ID + "/fork"
	if _, err := keyed(ctx, d, http.MethodPost, path, `{"count":3}`, "fork-crash"); err == nil {
		t.Log("the crashing fork answered")
	}
	if !d.Wait(60 * time.Second) {
		t.Fatal("daemon did not exit at the crash point")
	}
	d.Restart(nil)
	ids := forkIDs(t, mustKeyed(t, ctx, d, http.MethodPost, path, `{"count":3}`, "fork-crash"))
	if len(ids) != 3 {
		t.Fatalf("the retried fork made %d copies", len(ids))
	}
	list, _, err := d.Client().List(ctx, client.ListOptions{})
	if err != nil || len(list) != 4 {
		t.Fatalf("%d sandboxes after the retried fork, want the parent and 3 copies: %v", len(list), err)
	}
	for _, id := range ids {
		if got := catFile(t, ctx, d.Client(), id, "/root/p.txt"); got != "p" {
			t.Fatalf("copy %s reads %q", id, got)
		}
	}
	d.CheckConsistent(t)
}
