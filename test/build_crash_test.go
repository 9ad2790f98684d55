package sandpit_test

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// engineTemplateImages are the daemon's template and snapshot images the
// engine holds (tagged in its repository, labelled with the test run).
func engineTemplateImages(t *testing.T, d *harness.Daemon) []string {
	t.Helper()
	out, err := exec.Command("docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "label=sandpit.run="+d.Label).Output()
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, r := range strings.Fields(string(out)) {
		if strings.Contains(r, "sandpit-template/") {
			refs = append(refs, r)
		}
	}
	slices.Sort(refs)
	return refs
}

// storeTemplateImages are the images the daemon's templates and snapshots
// record.
func storeTemplateImages(t *testing.T, d *harness.Daemon) []string {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	var list apitypes.ListTemplatesResponse
	if err := json.Unmarshal(mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates", "").Body, &list); err != nil {
		t.Fatal(err)
	}
	var snaps struct {
		Snapshots []apitypes.Template `json:"snapshots"`
	}
	_ = json.Unmarshal(mustKeyed(t, ctx, d, http.MethodGet, "/v1/snapshots", "").Body, &snaps)
	var refs []string
	for _, tp := range append(list.Templates, snaps.Snapshots...) {
		if tp.Image != "" && !slices.Contains(refs, tp.Image) {
			refs = append(refs, tp.Image)
		}
	}
	slices.Sort(refs)
	return refs
}

// awaitImagesMatch waits (a few janitor passes) until the engine's images
// and the store's rows are one to one.
func awaitImagesMatch(t *testing.T, d *harness.Daemon, what string) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		engine, rows := engineTemplateImages(t, d), storeTemplateImages(t, d)
		if slices.Equal(engine, rows) {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the engine holds %v, the store records %v", what, engine, rows)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestBuildCrashLeavesNothing: a daemon killed between a build's image
// and its row, or in the middle of a build, leaves after its restart (and
// a janitor pass) engine images and store rows one to one; a retry with the
// same key then builds once and the template gets its image, rather than
// replaying the answer about the build that died.
func TestBuildCrashLeavesNothing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, point, step string
	}{
		{"between image and row", "after-image-build", "RUN echo image-then-die"},
		// The step names its pids cgroup, whose parent is the build's.
		{"during the build", "", "RUN echo slow-step-started $(grep -E ':pids:|^0::' /proc/self/cgroup | head -1 | cut -d: -f3) && sleep 30"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--janitor-interval", "200ms", "--idempotency-wait", "2s"}})
			ctx := ctxFor(t, 4*time.Minute)
			body := buildBody(t, apitypes.BuildTemplateRequest{Name: "crashy", Dockerfile: "FROM " + testBase + "\n" + tc.step + "\n"})
			if tc.point != "" {
				d.Stop()
				d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=" + tc.point})
			}
			a, err := keyed(ctx, d, http.MethodPost, "/v1/templates", body, "crash-build")
			if err != nil || a.Status != http.StatusAccepted {
				t.Fatalf("keyed build: %v %d %s", err, a.Status, a.Body)
			}
			buildCgroup := ""
			if tc.point == "" {
				fb := decodeBuild(t, a)
				for buildCgroup == "" {
					log := string(mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates/crashy/builds/"+fb.Build.ID+"/logs", "").Body)
					if m := regexp.MustCompile(`slow-step-started (/\S+)`).FindStringSubmatch(log); m != nil {
						buildCgroup = filepath.Dir(m[1])
						break
					}
					if ctx.Err() != nil {
						t.Fatal("the build never reached its slow step")
					}
					time.Sleep(100 * time.Millisecond)
				}
				d.Kill()
			}
			if !d.Wait(60 * time.Second) {
				t.Fatal("the daemon did not die")
			}
			d.Restart(nil)
			awaitImagesMatch(t, d, "after the restart")
			if buildCgroup != "" {
				// The dead daemon never removed its build's cgroup parent;
				// the restarted one does.
				waitCgroupGone(t, ctx, buildCgroup)
			}
			// The same key again builds (the answer about the dead build is
			// not replayed), and once: a third try replays the second.
			var tmpl apitypes.Template
			for i := 0; i < 2; i++ {
				r := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", body, "crash-build")
				if r.Status != http.StatusAccepted {
					t.Fatalf("retry %d: %d %s", i, r.Status, r.Body)
				}
				fb := decodeBuild(t, r)
				if b := awaitBuild(t, ctx, d, "crashy", fb.Build.ID); b.State != "ready" {
					t.Fatalf("retry %d's build: %s %s", i, b.State, b.Error)
				}
				if i == 1 && !r.Replayed {
					t.Fatal("the second retry was not a replay")
				}
				if err := json.Unmarshal(mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates/crashy", "").Body, &tmpl); err != nil {
					t.Fatal(err)
				}
			}
			if tmpl.Image == "" {
				t.Fatal("the template never got its image")
			}
			if got := awaitImagesMatch(t, d, "after the retries"); len(got) != 1 {
				t.Fatalf("images after the retries: %v, want one", got)
			}
		})
	}
}

// TestSnapshotCommitAfterRecovery: a daemon killed while the engine commits
// a snapshot restarts, and the engine's commit lands only after the
// restart's recovery ran (the engine finishes what a dead client asked).
// The janitor, which runs periodically and not only at start, removes that
// image; a same-key retry makes one snapshot; images and rows end one to
// one.
func TestSnapshotCommitAfterRecovery(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--janitor-interval", "200ms", "--idempotency-wait", "2s"}})
	ctx := ctxFor(t, 4*time.Minute)
	sb, err := d.Client().Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	d.Stop()
	d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=after-snapshot-commit"})
	if _, err := keyed(ctx, d, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/snapshots", `{"name": "snap"}`, "crash-snap"); err == nil {
		t.Fatal("the snapshot answered; the daemon should have died")
	}
	if !d.Wait(60 * time.Second) {
		t.Fatal("the daemon did not die")
	}
	// What the dead daemon's commit made: its tag and its labels.
	left := engineTemplateImages(t, d)
	if len(left) != 1 {
		t.Fatalf("images after the crash: %v", left)
	}
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{json .Config.Labels}}", left[0]).Output()
	if err != nil {
		t.Fatal(err)
	}
	var labels map[string]string
	if err := json.Unmarshal(out, &labels); err != nil {
		t.Fatal(err)
	}
	d.Restart(nil)
	awaitImagesMatch(t, d, "after recovery")
	// The engine's commit lands now, after recovery.
	args := []string{"commit"}
	for k, v := range labels {
		args = append(args, "--change", "LABEL "+k+"="+v)
	}
	ids := d.Containers(t, "sandpit.sandbox-id="+sb.ID)
	if len(ids) != 1 {
		t.Fatalf("%d containers of the sandbox", len(ids))
	}
	if out, err := exec.Command("docker", append(args, ids[0], left[0])...).CombinedOutput(); err != nil {
		t.Fatalf("docker commit: %v %s", err, out)
	}
	awaitImagesMatch(t, d, "after the late commit")
	// The same key makes one snapshot, once.
	for i := 0; i < 2; i++ {
		a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/snapshots", `{"name": "snap"}`, "crash-snap")
		if a.Status != http.StatusCreated && a.Status != http.StatusOK {
			t.Fatalf("retry %d: %d %s", i, a.Status, a.Body)
		}
	}
	if got := awaitImagesMatch(t, d, "after the retries"); len(got) != 1 {
		t.Fatalf("images after the retries: %v, want one", got)
	}
}

// TestE2BTemplateRequestSurvivesRestart: E2B's template build request
// (POST /v3/templates, before its steps arrive) is deduplicated by the
// idempotency engine, not the facade's memory. A request whose build a
// restart ended is not handed that dead build again: the same request
// after the restart makes one new build, which its retry gets too; its
// steps start it with the request's tag, and once it has started the next
// identical request is a build of its own.
func TestE2BTemplateRequestSurvivesRestart(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	request := func() (tpl, build string) {
		t.Helper()
		a := raw(t, ctx, d, d.Token, http.MethodPost, "/e2b/v3/templates", `{"name": "restartable:v1", "cpuCount": 1, "memoryMB": 512}`, "X-API-Key", d.Token)
		var out struct{ TemplateID, BuildID string }
		if err := json.Unmarshal(a.Body, &out); err != nil || a.Status != http.StatusAccepted || out.BuildID == "" {
			t.Fatalf("template request: %d %s", a.Status, a.Body)
		}
		return out.TemplateID, out.BuildID
	}
	tpl, dead := request()
	if _, again := request(); again != dead {
		t.Fatalf("a retry got build %s, want %s", again, dead)
	}
	// The retry was answered by the idempotency engine from the store.
	m := raw(t, ctx, d, d.Token, http.MethodGet, "/metrics", "")
	if !strings.Contains(string(m.Body), `sandpit_idempotency_outcomes_total{outcome="replay",scope="e2b:template-request"} 1`) {
		t.Fatalf("no replay of the template request in the idempotency engine's metrics:\n%s", grepLines(string(m.Body), "sandpit_idempotency_outcomes_total"))
	}
	d.Stop()
	if !d.Wait(30 * time.Second) {
		t.Fatal("the daemon did not stop")
	}
	d.Restart(nil)
	tpl2, first := request()
	if tpl2 != tpl || first == dead {
		t.Fatalf("after a restart the request got build %s of %s (the dead one is %s of %s)", first, tpl2, dead, tpl)
	}
	if _, again := request(); again != first {
		t.Fatalf("a retry after the restart got build %s, want %s", again, first)
	}
	start := raw(t, ctx, d, d.Token, http.MethodPost, "/e2b/v2/templates/"+tpl+"/builds/"+first,
		`{"fromImage": "`+testBase+`", "steps": [{"type": "RUN", "args": ["echo restartable"]}]}`, "X-API-Key", d.Token)
	if start.Status != http.StatusAccepted {
		t.Fatalf("start the build: %d %s", start.Status, start.Body)
	}
	if _, next := request(); next == first {
		t.Fatal("a request after the build started got the started build")
	}
	if b := awaitBuild(t, ctx, d, tpl, first); b.State != "ready" {
		t.Fatalf("the build: %s %s", b.State, b.Error)
	}
	var tp apitypes.Template
	if err := json.Unmarshal(mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates/"+tpl, "").Body, &tp); err != nil {
		t.Fatal(err)
	}
	if tp.Tags["v1"] != first {
		t.Fatalf("the build's tags: %v, want v1 at %s", tp.Tags, first)
	}
}

// grepLines keeps the lines of text that contain substr.
func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
