package sandpit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestBuildQueueInterleavesOwners: with one build slot held by one owner's
// long build and two more of that owner's queued behind it, another
// owner's build is the next to run, its queue position says so (in the API
// and in `sandpit template ls`), and it ends before the first owner's
// queued builds do.
func TestBuildQueueInterleavesOwners(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--max-builds", "1", "--max-builds-per-owner", "3"}})
	ctx := ctxFor(t, 4*time.Minute)
	tokens, _ := ownerTokens(t, ctx, d.Client(), "alice", "bob")
	start := func(owner, name, step string) apitypes.BuildTemplateResponse {
		t.Helper()
		a := raw(t, ctx, d, tokens[owner], http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: name, Dockerfile: "FROM " + testBase + "\nRUN " + step + "\n"}))
		if a.Status != http.StatusAccepted {
			t.Fatalf("%s's build %s: %d %s", owner, name, a.Status, a.Body)
		}
		return decodeBuild(t, a)
	}
	get := func(owner, name, build string) apitypes.TemplateBuild {
		t.Helper()
		var b apitypes.TemplateBuild
		a := raw(t, ctx, d, tokens[owner], http.MethodGet, "/v1/templates/"+name+"/builds/"+build, "")
		if err := json.Unmarshal(a.Body, &b); err != nil {
			t.Fatalf("get build: %d %s", a.Status, a.Body)
		}
		return b
	}
	a1 := start("alice", "a1", "echo a1 && sleep 6")
	for !strings.Contains(buildLog(t, ctx, d, tokens["alice"], "a1", a1.Build.ID), "a1") {
		if ctx.Err() != nil {
			t.Fatal("alice's first build never ran")
		}
		time.Sleep(100 * time.Millisecond)
	}
	a2 := start("alice", "a2", "echo a2 && sleep 3")
	a3 := start("alice", "a3", "echo a3 && sleep 3")
	b1 := start("bob", "b1", "echo b1")
	if p := get("bob", "b1", b1.Build.ID).QueuePosition; p != 1 {
		t.Fatalf("bob's build is at queue position %d, want 1", p)
	}
	if p2, p3 := get("alice", "a2", a2.Build.ID).QueuePosition, get("alice", "a3", a3.Build.ID).QueuePosition; p2 < 2 || p3 < 2 {
		t.Fatalf("alice's queued builds at positions %d and %d, want behind bob's", p2, p3)
	}
	cmd := exec.CommandContext(ctx, sandpitBin, "template", "ls")
	cmd.Env = append(os.Environ(), "SANDPIT_ADDR="+d.Addr, "SANDPIT_TOKEN="+tokens["bob"])
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "queued (1)") {
		t.Fatalf("sandpit template ls: %v\n%s", err, out)
	}
	bb := awaitBuildAs(t, ctx, d, tokens["bob"], "b1", b1.Build.ID)
	x2 := awaitBuildAs(t, ctx, d, tokens["alice"], "a2", a2.Build.ID)
	x3 := awaitBuildAs(t, ctx, d, tokens["alice"], "a3", a3.Build.ID)
	for _, b := range []apitypes.TemplateBuild{bb, x2, x3} {
		if b.State != "ready" {
			t.Fatalf("build %s: %s %s", b.ID, b.State, b.Error)
		}
	}
	if !bb.EndedAt.Before(*x2.EndedAt) || !bb.EndedAt.Before(*x3.EndedAt) {
		t.Fatalf("bob's build ended at %v, after alice's queued builds (%v, %v)", bb.EndedAt, x2.EndedAt, x3.EndedAt)
	}
}

// TestBuildCachePerOwner: an owner's builds reuse the owner's own layers,
// and a build of another owner that runs the same step does not: its log
// never says "Using cache", so it cannot tell that someone ran the step.
func TestBuildCachePerOwner(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 4*time.Minute)
	tokens, _ := ownerTokens(t, ctx, d.Client(), "alice", "bob")
	step := "RUN echo shared-step-" + d.Label
	build := func(owner, name, df string) string {
		t.Helper()
		a := raw(t, ctx, d, tokens[owner], http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: name, Dockerfile: df}))
		if a.Status != http.StatusAccepted {
			t.Fatalf("%s's build %s: %d %s", owner, name, a.Status, a.Body)
		}
		fb := decodeBuild(t, a)
		if b := awaitBuildAs(t, ctx, d, tokens[owner], name, fb.Build.ID); b.State != "ready" {
			t.Fatalf("%s's build %s: %s %s", owner, name, b.State, b.Error)
		}
		return buildLog(t, ctx, d, tokens[owner], name, fb.Build.ID)
	}
	if log := build("alice", "first", "FROM "+testBase+"\n"+step+"\n"); strings.Contains(log, "Using cache") {
		t.Fatalf("alice's first build used a cache:\n%s", log)
	}
	if log := build("alice", "second", "FROM "+testBase+"\n"+step+"\nRUN echo more\n"); !strings.Contains(log, "Using cache") {
		t.Fatalf("alice's second build did not reuse her own layer:\n%s", log)
	}
	if log := build("bob", "mine", "FROM "+testBase+"\n"+step+"\nRUN echo bob\n"); strings.Contains(log, "Using cache") {
		t.Fatalf("bob's build reused alice's layer:\n%s", log)
	}
}

// TestImageLabelsStayOutOfContainers: an image that carries the daemon's
// labels (an operator's image, allowed to tenants) does not pass them to a
// sandbox's container, so the janitor never takes the sandbox for a pooled
// container and removes it.
func TestImageLabelsStayOutOfContainers(t *testing.T) {
	t.Parallel()
	ref := fmt.Sprintf("sptest-labelled/img:%d", time.Now().UnixNano())
	dockerBuild(t, ref, "FROM "+testBase+"\nLABEL sandpit.pool=evil sandpit.sandbox-id=other sandpit.template-build=bldx\n")
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--allow-image", "sptest-labelled/*", "--janitor-interval", "200ms"}})
	ctx := ctxFor(t, 2*time.Minute)
	tokens, _ := ownerTokens(t, ctx, d.Client(), "carol")
	c := client.New(d.Addr, tokens["carol"])
	sb, err := c.Create(ctx, client.CreateRequest{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	ids := d.Containers(t, "sandpit.sandbox-id="+sb.ID)
	if len(ids) != 1 {
		t.Fatalf("%d containers for the sandbox", len(ids))
	}
	out, err := exec.Command("docker", "inspect", "--format", `{{index .Config.Labels "sandpit.pool"}}|{{index .Config.Labels "sandpit.sandbox-id"}}|{{index .Config.Labels "sandpit.template-build"}}`, ids[0]).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "|"+sb.ID+"|" {
		t.Fatalf("the container's sandpit labels are %q, want the image's blanked", got)
	}
	// Several janitor passes later the sandbox still runs.
	time.Sleep(2 * time.Second)
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo", Args: []string{"alive"}})
	if err != nil || res.Stdout != "alive\n" {
		t.Fatalf("after janitor passes: %q %v", res.Stdout, err)
	}
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.State != "running" {
		t.Fatalf("the sandbox is %s (%v)", got.State, err)
	}
}
