package sandpit_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// testBase is the tiny local image the harness builds; builds start FROM it.
const testBase = "sandpit/base:test"

// contextTar builds a tar of files (name -> content; a content starting
// with "->" is a symlink to the rest).
func contextTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: time.Unix(1, 0)}
		if target, ok := strings.CutPrefix(body, "->"); ok {
			h = &tar.Header{Name: name, Linkname: target, Typeflag: tar.TypeSymlink, Mode: 0o777, ModTime: time.Unix(1, 0)}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// uploadContext uploads an archive and returns its hash.
func uploadContext(t *testing.T, ctx context.Context, d *harness.Daemon, archive []byte) string {
	t.Helper()
	sum := sha256.Sum256(archive)
	hash := hex.EncodeToString(sum[:])
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, d.URL()+"/v1/templates/files/"+hash, bytes.NewReader(archive))
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	return hash
}

func buildBody(t *testing.T, req apitypes.BuildTemplateRequest) string {
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func decodeBuild(t *testing.T, a harness.Answer) apitypes.BuildTemplateResponse {
	t.Helper()
	var out apitypes.BuildTemplateResponse
	if err := json.Unmarshal(a.Body, &out); err != nil {
		t.Fatalf("decode %d %s: %v", a.Status, a.Body, err)
	}
	return out
}

// awaitBuild polls the build until it ends.
func awaitBuild(t *testing.T, ctx context.Context, d *harness.Daemon, tmpl, build string) apitypes.TemplateBuild {
	t.Helper()
	return awaitBuildAs(t, ctx, d, d.Token, tmpl, build)
}

func taggedImages(t *testing.T, label string) []string {
	t.Helper()
	out, err := exec.Command("docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "label=sandpit.template-build="+label).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// TestTemplateBuildNative: a Dockerfile with its context builds into a
// template a sandbox is created from, running its start command before the
// create answers; the keyed request replays; a second request of the same
// definition replays the finished build instead of building again; the log
// is served; a second definition racing the first for the name is a 409.
func TestTemplateBuildNative(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 4*time.Minute)
	hash := uploadContext(t, ctx, d, contextTar(t, map[string]string{
		"app/hello.txt": "hello from the context\n",
		"app/link":      "->hello.txt",
	}))
	req := apitypes.BuildTemplateRequest{
		Name:       "webby",
		Dockerfile: "FROM " + testBase + "\nCOPY app /app\nRUN echo built > /built && echo step-output-marker\n",
		Context:    hash,
		StartCmd:   "echo started > /tmp/started; sleep 1000",
		ReadyCmd:   "test -f /tmp/started",
		Tags:       []string{"v1"},
	}
	first := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, req), "build-1")
	if first.Status != http.StatusAccepted {
		t.Fatalf("build: %d %s", first.Status, first.Body)
	}
	fb := decodeBuild(t, first)
	again := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, req), "build-1")
	if !again.Replayed || decodeBuild(t, again).Build.ID != fb.Build.ID {
		t.Fatalf("keyed retry: replayed=%v %s, want the first build %s", again.Replayed, again.Body, fb.Build.ID)
	}
	// Another definition of the same name while the first builds: refused.
	other := req
	other.Dockerfile += "RUN echo other\n"
	if a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, other), "build-other"); a.Status != http.StatusConflict && a.Status != http.StatusAccepted {
		t.Fatalf("racing build: %d %s", a.Status, a.Body)
	} else if a.Status == http.StatusAccepted {
		// The first ended before this one started: it was a rebuild, and
		// must end too before the rest of the test.
		ob := decodeBuild(t, a)
		awaitBuild(t, ctx, d, "webby", ob.Build.ID)
	}
	b := awaitBuild(t, ctx, d, "webby", fb.Build.ID)
	if b.State != "ready" || b.Image == "" {
		t.Fatalf("build ended %s: %s", b.State, b.Error)
	}
	logs := mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates/webby/builds/"+fb.Build.ID+"/logs?follow=true", "")
	if !strings.Contains(string(logs.Body), "step-output-marker") {
		t.Fatalf("build log lacks the RUN step's output:\n%s", logs.Body)
	}

	// The same definition again, under a new key: no second engine build.
	rebuild := decodeBuild(t, mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, req), "build-2"))
	rb := awaitBuild(t, ctx, d, "webby", rebuild.Build.ID)
	if rb.State != "ready" || rb.Image != b.Image || rebuild.Template.ID != fb.Template.ID {
		t.Fatalf("rebuild: %s image %q template %s, want ready with %q on %s", rb.State, rb.Image, rebuild.Template.ID, b.Image, fb.Template.ID)
	}
	rlogs := mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates/webby/builds/"+rebuild.Build.ID+"/logs", "")
	if strings.Contains(string(rlogs.Body), "step-output-marker") || !strings.Contains(string(rlogs.Body), "reusing its image") {
		t.Fatalf("the rebuild ran the engine build again:\n%s", rlogs.Body)
	}

	c := d.Client()
	for _, ref := range []string{"webby", "webby:v1", fb.Template.ID} {
		sb, err := c.Create(ctx, client.CreateRequest{Template: ref})
		if err != nil {
			t.Fatalf("create from %s: %v", ref, err)
		}
		// The ready command passed before the create answered, so the
		// start command's file is there at once.
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "cat /app/hello.txt /app/link /built /tmp/started; ps | grep -c 'sleep 100[0]'"}})
		if err != nil {
			t.Fatal(err)
		}
		want := "hello from the context\nhello from the context\nbuilt\nstarted\n1\n"
		if res.Stdout != want {
			t.Fatalf("from %s: %q (stderr %q), want %q", ref, res.Stdout, res.Stderr, want)
		}
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Create(ctx, client.CreateRequest{Template: "webby:nosuchtag"}); err == nil || !strings.Contains(err.Error(), "no tag") {
		t.Fatalf("create from a missing tag: %v", err)
	}

	// Deleting the template removes its image.
	if a := mustKeyed(t, ctx, d, http.MethodDelete, "/v1/templates/webby", "", "rm-1"); a.Status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", a.Status, a.Body)
	}
	if out, _ := exec.Command("docker", "image", "inspect", b.Image).CombinedOutput(); !strings.Contains(string(out), "No such image") {
		t.Fatalf("image %s kept after its template was deleted: %s", b.Image, out)
	}
}

// TestTemplateConcurrentDuplicateBuilds: twenty identical build requests at
// once, without keys, make one engine build; every caller ends ready with
// the same image.
func TestTemplateConcurrentDuplicateBuilds(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	req := apitypes.BuildTemplateRequest{Name: "dup", Dockerfile: "FROM " + testBase + "\nRUN sleep 2 && echo engine-build-ran\n"}
	const n = 20
	builds := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := keyed(ctx, d, http.MethodPost, "/v1/templates", buildBody(t, req))
			if err != nil || a.Status != http.StatusAccepted {
				t.Errorf("build %d: %v %d %s", i, err, a.Status, a.Body)
				return
			}
			builds[i] = decodeBuild(t, a).Build.ID
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var image string
	for _, id := range builds {
		b := awaitBuild(t, ctx, d, "dup", id)
		if b.State != "ready" || (image != "" && b.Image != image) {
			t.Fatalf("build %s: %s %q %s, want ready with %q", id, b.State, b.Image, b.Error, image)
		}
		image = b.Image
	}
	if got := strings.Count(d.Logs(), "template build ended"); got != 1 {
		t.Fatalf("%d engine builds ended for %d identical requests, want 1", got, n)
	}
	// The one build shows in /metrics, and none is left running.
	_, fams := scrape(t, ctx, d, d.Token)
	if got := value(fams, "sandpit_template_builds_total", map[string]string{"state": "ready"}); got != 1 {
		t.Errorf("sandpit_template_builds_total{state=ready} = %v, want 1", got)
	}
	if got := value(fams, "sandpit_template_builds_running", nil); got != 0 {
		t.Errorf("sandpit_template_builds_running = %v, want 0", got)
	}
}

// TestTemplateFailedBuild: a step that fails leaves the build in error with
// the step's message and nothing tagged.
func TestTemplateFailedBuild(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{
		Name: "broken", Dockerfile: "FROM " + testBase + "\nRUN echo about-to-fail && exit 7\n",
	}), "fail-1")
	if a.Status != http.StatusAccepted {
		t.Fatalf("build: %d %s", a.Status, a.Body)
	}
	fb := decodeBuild(t, a)
	b := awaitBuild(t, ctx, d, "broken", fb.Build.ID)
	if b.State != "error" || !strings.Contains(b.Error, "returned a non-zero code: 7") {
		t.Fatalf("build %s: %q", b.State, b.Error)
	}
	if imgs := taggedImages(t, fb.Build.ID); len(imgs) > 0 {
		t.Fatalf("a failed build left images tagged: %v", imgs)
	}
	tm := mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates/broken", "")
	var tp apitypes.Template
	if err := json.Unmarshal(tm.Body, &tp); err != nil || tp.Image != "" || tp.Build == nil || tp.Build.State != "error" {
		t.Fatalf("template after a failed build: %s", tm.Body)
	}
	if _, err := d.Client().Create(ctx, client.CreateRequest{Template: "broken"}); err == nil || !strings.Contains(err.Error(), "no ready build") {
		t.Fatalf("create from a template without a ready build: %v", err)
	}
	// Bad input: no side effect, a clear 400.
	for _, body := range []string{
		`{"name": "Bad Name", "dockerfile": "FROM x"}`,
		`{"name": "ok", "dockerfile": ""}`,
		`{"name": "ok", "dockerfile": "FROM x", "context": "` + strings.Repeat("a", 64) + `"}`,
	} {
		if a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", body); a.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", body, a.Status, a.Body)
		}
	}
	// An archive whose entries leave the context is refused on upload.
	for _, name := range []string{"../escape", "/etc/passwd", "a/../../b"} {
		evil := contextTar(t, map[string]string{name: "x"})
		sum := sha256.Sum256(evil)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, d.URL()+"/v1/templates/files/"+hex.EncodeToString(sum[:]), bytes.NewReader(evil))
		req.Header.Set("Authorization", "Bearer "+d.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("upload of an entry %q: %d, want 400", name, resp.StatusCode)
		}
	}
	list := mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates", "")
	if strings.Contains(string(list.Body), `"ok"`) {
		t.Fatalf("a refused build left a template: %s", list.Body)
	}
}

// TestTemplateBuildSurvivesKill: a daemon killed in the middle of a build
// leaves, after its restart, no build stuck in building and nothing tagged,
// and the same request builds again.
func TestTemplateBuildSurvivesKill(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--max-builds-per-owner", "1"}})
	ctx := ctxFor(t, 3*time.Minute)
	req := apitypes.BuildTemplateRequest{Name: "slow", Dockerfile: "FROM " + testBase + "\nRUN echo slow-step-started && sleep 30\n"}
	fb := decodeBuild(t, mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, req), "slow-1"))
	// The owner runs its one build: another of another template is 429,
	// and makes nothing.
	over := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: "second", Dockerfile: "FROM " + testBase + "\n"}), "second-1")
	if over.Status != http.StatusTooManyRequests || over.Code() != "quota_exceeded" {
		t.Fatalf("a build over the owner's limit: %d %s", over.Status, over.Body)
	}
	if a := mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates/second", ""); a.Status != http.StatusNotFound {
		t.Fatalf("the refused build left a template: %d %s", a.Status, a.Body)
	}
	for !strings.Contains(string(mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates/slow/builds/"+fb.Build.ID+"/logs", "").Body), "slow-step-started") {
		if ctx.Err() != nil {
			t.Fatal("the build never reached its slow step")
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.Signal(syscall.SIGKILL)
	d.Wait(10 * time.Second)
	d.Restart(nil)
	b := awaitBuild(t, ctx, d, "slow", fb.Build.ID)
	if b.State != "error" || !strings.Contains(b.Error, "daemon stopped during the build") {
		t.Fatalf("after the restart the build is %s %q", b.State, b.Error)
	}
	if imgs := taggedImages(t, fb.Build.ID); len(imgs) > 0 {
		t.Fatalf("the killed build left images tagged: %v", imgs)
	}
	// The retry of the same keyed request builds again (its claim was left
	// pending by the killed process), and a fresh request of the same
	// definition is not stuck behind the dead build.
	quick := req
	quick.Dockerfile = "FROM " + testBase + "\nRUN echo quick\n"
	nb := decodeBuild(t, mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, quick), fmt.Sprint("slow-2")))
	if got := awaitBuild(t, ctx, d, "slow", nb.Build.ID); got.State != "ready" {
		t.Fatalf("a build after the restart: %s %s", got.State, got.Error)
	}
}

// TestTemplateOwners: templates are their owner's: another owner neither
// sees nor creates from them and has a template of the same name of its
// own; a non-admin owner may build only on images it may run (or its own
// templates'), not on whatever else the engine holds; a read-only token
// cannot build.
func TestTemplateOwners(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	admin := d.Client()
	private := "sandpit-private/secret:" + d.Label
	if out, err := exec.Command("docker", "tag", testBase, private).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", private).Run() })
	tokens, ro := ownerTokens(t, ctx, admin, "alice", "bob")
	build := func(token, dockerfile string) harness.Answer {
		t.Helper()
		return raw(t, ctx, d, token, http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: "shared", Dockerfile: dockerfile}))
	}
	if a := build(ro.Secret, "FROM "+testBase+"\n"); a.Status != http.StatusForbidden {
		t.Fatalf("read-only token built: %d %s", a.Status, a.Body)
	}
	if a := build(tokens["bob"], "FROM "+private+"\nRUN cat /etc/hostname\n"); a.Status != http.StatusForbidden || !strings.Contains(string(a.Body), "may not read the image") {
		t.Fatalf("bob built on an image he may not run: %d %s", a.Status, a.Body)
	}
	ids := map[string]string{}
	for _, o := range []string{"alice", "bob"} {
		a := build(tokens[o], "FROM "+testBase+"\nRUN echo "+o+" > /whose\n")
		if a.Status != http.StatusAccepted {
			t.Fatalf("%s build: %d %s", o, a.Status, a.Body)
		}
		fb := decodeBuild(t, a)
		ids[o] = fb.Template.ID
		if fb.Template.Owner != o {
			t.Fatalf("%s's template is owned by %q", o, fb.Template.Owner)
		}
	}
	if ids["alice"] == ids["bob"] {
		t.Fatal("two owners share one template")
	}
	// Each owner's template of one name is its own, and builds on it are
	// allowed: an owner may start FROM its own template's image.
	for _, o := range []string{"alice", "bob"} {
		c := client.New(d.Addr, tokens[o])
		var tp apitypes.Template
		for tp.Image == "" {
			a := raw(t, ctx, d, tokens[o], http.MethodGet, "/v1/templates/shared", "")
			if err := json.Unmarshal(a.Body, &tp); err != nil || a.Status != http.StatusOK {
				t.Fatalf("%s get: %d %s", o, a.Status, a.Body)
			}
			if tp.Build != nil && tp.Build.State == "error" {
				t.Fatalf("%s build failed: %s", o, tp.Build.Error)
			}
			time.Sleep(100 * time.Millisecond)
		}
		sb, err := c.Create(ctx, client.CreateRequest{Template: "shared"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "cat", Args: []string{"/whose"}})
		if err != nil || res.Stdout != o+"\n" {
			t.Fatalf("%s's sandbox from its template: %q %v", o, res.Stdout, err)
		}
		if a := raw(t, ctx, d, tokens[o], http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: "derived", Dockerfile: "FROM " + tp.Image + "\n"})); a.Status != http.StatusAccepted {
			t.Fatalf("%s building on its own template: %d %s", o, a.Status, a.Body)
		}
	}
	// Another owner's template id is not found.
	if a := raw(t, ctx, d, tokens["bob"], http.MethodGet, "/v1/templates/"+ids["alice"], ""); a.Status != http.StatusNotFound {
		t.Fatalf("bob reads alice's template: %d %s", a.Status, a.Body)
	}
	if a := raw(t, ctx, d, tokens["bob"], http.MethodDelete, "/v1/templates/"+ids["alice"], ""); a.Status != http.StatusNotFound {
		t.Fatalf("bob deletes alice's template: %d %s", a.Status, a.Body)
	}
	if _, err := client.New(d.Addr, tokens["bob"]).Create(ctx, client.CreateRequest{Template: ids["alice"]}); err == nil {
		t.Fatal("bob created a sandbox from alice's template")
	}
}

// TestTemplateCrashAfterImageBuild kills the daemon after the engine tagged
// a build's image and before the store recorded it: after the restart the
// build is error, the orphan image is gone, and the same request builds
// again to a ready template.
func TestTemplateCrashAfterImageBuild(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	d.Stop()
	d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=after-image-build"})
	req := apitypes.BuildTemplateRequest{Name: "crashy", Dockerfile: "FROM " + testBase + "\nRUN echo crashy > /crashy\n"}
	fb := decodeBuild(t, mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, req), "crash-1"))
	if !d.Wait(60 * time.Second) {
		t.Fatal("daemon did not exit at the crash point")
	}
	if imgs := taggedImages(t, fb.Build.ID); len(imgs) != 1 {
		t.Fatalf("%d images tagged at the crash point, want the 1 the store does not know of", len(imgs))
	}
	d.Restart(nil)
	b := awaitBuild(t, ctx, d, "crashy", fb.Build.ID)
	if b.State != "error" {
		t.Fatalf("the interrupted build is %s", b.State)
	}
	if imgs := taggedImages(t, fb.Build.ID); len(imgs) != 0 {
		t.Fatalf("orphan images after the restart: %v", imgs)
	}
	again := decodeBuild(t, mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, req), "crash-2"))
	if got := awaitBuild(t, ctx, d, "crashy", again.Build.ID); got.State != "ready" {
		t.Fatalf("the build after the restart: %s %s", got.State, got.Error)
	}
	sb, err := d.Client().Create(ctx, client.CreateRequest{Template: "crashy"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := d.Client().Exec(ctx, sb.ID, client.ExecRequest{Cmd: "cat", Args: []string{"/crashy"}}); err != nil || res.Stdout != "crashy\n" {
		t.Fatalf("sandbox from the rebuilt template: %q %v", res.Stdout, err)
	}
}
