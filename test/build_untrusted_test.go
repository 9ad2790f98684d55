package sandpit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// privateImage builds an image only the operator may use, holding a secret,
// and returns its reference and full ID.
func privateImage(t *testing.T, label, secret string) (string, string) {
	t.Helper()
	ref := "sandpit-private/secret:" + label
	dockerBuild(t, ref, "FROM "+testBase+"\nRUN echo "+secret+" > /secret\nLABEL sandpit.run="+label+"\n")
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", ref).Output()
	if err != nil {
		t.Fatal(err)
	}
	return ref, strings.TrimPrefix(strings.TrimSpace(string(out)), "sha256:")
}

// dockerBuild builds an image of the operator's (not through the daemon)
// and removes it when the test ends.
func dockerBuild(t *testing.T, ref, dockerfile string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker", "build", "-q", "-t", ref, dir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", ref).Run() })
}

// TestBuildBasesRefused: every way a Dockerfile can name an image (a FROM
// continued on the next line, the escape directive, an ARG, COPY --from
// with a name, an ID prefix or a full ID, RUN --mount from=, a digest,
// another owner's snapshot) is refused to a tenant whose policy does not
// allow the image, through /v1 and Daytona's builder; the answer is the
// same for an image that exists and one that does not, and the secret in
// the image never reaches a log or a sandbox. ONBUILD, a frontend and
// sandpit.* labels are refused too. The same daemon still builds what is
// allowed.
func TestBuildBasesRefused(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 4*time.Minute)
	admin := d.Client()
	const secret = "alice-private-data"
	private, id := privateImage(t, d.Label, secret)
	tokens, _ := ownerTokens(t, ctx, admin, "alice", "bob")

	// Alice's snapshot of a sandbox holding her data: Bob may not build
	// on it, by name or by its image.
	ac := client.New(d.Addr, tokens["alice"])
	sb, err := ac.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo " + secret + " > /alice"}}); err != nil {
		t.Fatal(err)
	}
	snap := raw(t, ctx, d, tokens["alice"], http.MethodPost, "/v1/sandboxes/"+sb.ID+"/snapshots", `{"name": "alice-snap"}`)
	var st apitypes.Template
	if err := json.Unmarshal(snap.Body, &st); err != nil || st.Image == "" {
		t.Fatalf("alice's snapshot: %d %s", snap.Status, snap.Body)
	}

	// Each attack names the image as %s; the made-up twin names an image
	// that does not exist in the same place.
	attacks := []struct{ name, dockerfile, real, fake string }{
		{"continued FROM", "FROM \\\n  %s\nRUN cat /secret\n", private, "sandpit-private/none:x"},
		{"escape directive", "# escape=`\nFROM `\n  %s\nRUN cat /secret\n", private, "sandpit-private/none:x"},
		{"ARG in FROM", "ARG BASE=%s\nFROM ${BASE}\nRUN cat /secret\n", private, "sandpit-private/none:x"},
		{"COPY --from name", "FROM " + testBase + "\nCOPY --from=%s /secret /s\nRUN cat /s\n", private, "sandpit-private/none:x"},
		{"COPY --from continued", "FROM " + testBase + "\nCOPY \\\n --from=%s /secret /s\n", private, "sandpit-private/none:x"},
		{"COPY --from ID prefix", "FROM " + testBase + "\nCOPY --from=%s /secret /s\n", id[:4], "0f0f"},
		{"COPY --from full ID", "FROM " + testBase + "\nCOPY --from=sha256:%s /secret /s\n", id, strings.Repeat("0", 64)},
		{"FROM ID", "FROM %s\n", id[:12], "0f0f0f0f0f0f"},
		{"RUN --mount from", "FROM " + testBase + "\nRUN --mount=type=bind,from=%s,target=/m cat /m/secret\n", private, "sandpit-private/none:x"},
		{"digest", "FROM %s\n", testBase + "@sha256:" + id, testBase + "@sha256:" + strings.Repeat("0", 64)},
		{"another owner's snapshot", "FROM %s\nRUN cat /alice\n", st.Image, strings.Replace(st.Image, ":snap-", ":snap-0", 1)},
	}
	same := func(t *testing.T, what string, a, b harness.Answer, real, fake string) {
		t.Helper()
		if a.Status != http.StatusForbidden {
			t.Fatalf("%s: %d %s, want 403", what, a.Status, a.Body)
		}
		norm := func(body []byte, ref string) string {
			s := strings.ReplaceAll(string(body), ref, "IMAGE")
			return regexp.MustCompile(`"(request_id|timestamp)":"[^"]*"`).ReplaceAllString(s, "")
		}
		if a.Status != b.Status || norm(a.Body, real) != norm(b.Body, fake) {
			t.Fatalf("%s: the answer tells an existing image from a made-up one:\n%d %s\n%d %s", what, a.Status, a.Body, b.Status, b.Body)
		}
		if strings.Contains(string(a.Body), secret) {
			t.Fatalf("%s: the secret is in the answer: %s", what, a.Body)
		}
	}
	for _, tc := range attacks {
		t.Run(tc.name, func(t *testing.T) {
			v1 := func(ref string) harness.Answer {
				return raw(t, ctx, d, tokens["bob"], http.MethodPost, "/v1/templates",
					buildBody(t, apitypes.BuildTemplateRequest{Name: "attack", Dockerfile: fmt.Sprintf(tc.dockerfile, ref)}))
			}
			same(t, "/v1", v1(tc.real), v1(tc.fake), tc.real, tc.fake)
			daytona := func(ref string) harness.Answer {
				body, _ := json.Marshal(map[string]any{"buildInfo": map[string]any{"dockerfileContent": fmt.Sprintf(tc.dockerfile, ref)}})
				return raw(t, ctx, d, tokens["bob"], http.MethodPost, "/daytona/sandbox", string(body))
			}
			same(t, "Daytona", daytona(tc.real), daytona(tc.fake), tc.real, tc.fake)
		})
	}
	for name, df := range map[string]string{
		"ONBUILD":        "FROM " + testBase + "\nONBUILD COPY --from=" + private + " /secret /s\n",
		"frontend":       "# syntax=" + private + "\nFROM " + testBase + "\n",
		"sandpit label":  "FROM " + testBase + "\nLABEL sandpit.pool=x\n",
		"network flag":   "FROM " + testBase + "\nRUN --network=host true\n",
		"security flag":  "FROM " + testBase + "\nRUN --security=insecure true\n",
		"unknown instr.": "FROM " + testBase + "\nFROBNICATE\n",
	} {
		a := raw(t, ctx, d, tokens["bob"], http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: "attack", Dockerfile: df}))
		if a.Status != http.StatusForbidden && a.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 403 or 400", name, a.Status, a.Body)
		}
	}
	// The admin may not set the daemon's labels either.
	if a := raw(t, ctx, d, d.Token, http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: "attack", Dockerfile: "FROM " + testBase + "\nLABEL sandpit.pool=x\n"})); a.Status != http.StatusForbidden {
		t.Errorf("the admin set a sandpit.* label: %d %s", a.Status, a.Body)
	}
	// Nothing was made for Bob by a refused build through /v1.
	if a := raw(t, ctx, d, tokens["bob"], http.MethodGet, "/v1/templates/attack", ""); a.Status != http.StatusNotFound {
		t.Fatalf("a refused build left a template: %d %s", a.Status, a.Body)
	}
	// What is allowed still builds: a continued FROM of an allowed image
	// and a copy from an earlier stage, by name and by index.
	ok := "FROM \\\n " + testBase + " AS first\nRUN echo staged > /staged\nFROM " + testBase + "\nCOPY --from=first /staged /a\nCOPY --from=0 /staged /b\nRUN cat /a /b\n"
	a := raw(t, ctx, d, tokens["bob"], http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: "fine", Dockerfile: ok}))
	if a.Status != http.StatusAccepted {
		t.Fatalf("an allowed build: %d %s", a.Status, a.Body)
	}
	fb := decodeBuild(t, a)
	if b := awaitBuildAs(t, ctx, d, tokens["bob"], "fine", fb.Build.ID); b.State != "ready" {
		t.Fatalf("the allowed build: %s %s", b.State, b.Error)
	}
	logs := raw(t, ctx, d, tokens["bob"], http.MethodGet, "/v1/templates/fine/builds/"+fb.Build.ID+"/logs", "")
	if strings.Contains(string(logs.Body), secret) {
		t.Fatalf("the secret reached a build log: %s", logs.Body)
	}
	if strings.Contains(d.Logs(), secret) {
		t.Fatal("the secret reached the daemon's log")
	}
}

// buildLog returns a build's whole log as text.
func buildLog(t *testing.T, ctx context.Context, d *harness.Daemon, token, tmpl, build string) string {
	t.Helper()
	a := raw(t, ctx, d, token, http.MethodGet, "/v1/templates/"+tmpl+"/builds/"+build+"/logs", "")
	if a.Status != http.StatusOK {
		t.Fatalf("build log: %d %s", a.Status, a.Body)
	}
	return string(a.Body)
}

// TestBuildStepsAreSandboxed: a build step runs under the limits a sandbox
// of its owner gets (memory and pids, read from inside the step), and
// cannot reach a host listener that a sandbox cannot reach either (on the
// engine's default bridge it could).
func TestBuildStepsAreSandboxed(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--default-memory-mb", "300", "--pids-limit", "64"}})
	ctx := ctxFor(t, 4*time.Minute)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "HOST-REACHED\n")
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	gw := dockerBridgeGateway(t)
	// The listener speaks first, so nc prints its greeting when it gets
	// through. (busybox wget, not nc, crashes in the test image here.)
	probe := fmt.Sprintf("nc -w 3 %s %d </dev/null || echo HOST-BLOCKED", gw, port)
	df := "FROM " + testBase + "\n" +
		"RUN echo MEM=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max)\n" +
		// The shell gives up at the first fork the limit refuses; the
		// sleeps it started are counted once they are gone.
		"RUN (for i in $(seq 1 100); do sleep 30 & echo x >> /tmp/n; done) 2>/dev/null; kill -9 -1 2>/dev/null; sleep 1; echo SPAWNED=$(wc -l < /tmp/n)\n" +
		"RUN " + probe + "\n" +
		// The step names its pids cgroup and waits, so the test reads the
		// limit the step runs under from the host, where the cgroup the
		// limit sits on (the step's parent) is visible.
		"RUN echo PIDS-CGROUP=$(grep -E ':pids:|^0::' /proc/self/cgroup | head -1 | cut -d: -f3) && sleep 8\n"
	a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: "limits", Dockerfile: df}))
	if a.Status != http.StatusAccepted {
		t.Fatalf("build: %d %s", a.Status, a.Body)
	}
	fb := decodeBuild(t, a)
	pidsMax, parent := "", ""
	for pidsMax == "" && ctx.Err() == nil {
		if m := regexp.MustCompile(`PIDS-CGROUP=(/\S+)`).FindStringSubmatch(buildLog(t, ctx, d, d.Token, "limits", fb.Build.ID)); m != nil {
			// The limit is on the step's parent, the build's own cgroup:
			// in the pids hierarchy (cgroup v1) or the unified one (v2).
			parent = filepath.Dir(m[1])
			data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", parent, "pids.max"))
			if err != nil {
				if data, err = os.ReadFile(filepath.Join("/sys/fs/cgroup", parent, "pids.max")); err != nil {
					t.Fatalf("read the step's pids limit: %v", err)
				}
			}
			pidsMax = strings.TrimSpace(string(data))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if pidsMax != "64" {
		t.Errorf("the build step's cgroup allows %q processes, want the sandbox limit 64", pidsMax)
	}
	b := awaitBuild(t, ctx, d, "limits", fb.Build.ID)
	log := buildLog(t, ctx, d, d.Token, "limits", fb.Build.ID)
	if b.State != "ready" {
		t.Fatalf("build: %s %s\n%s", b.State, b.Error, log)
	}
	if !strings.Contains(log, "MEM="+strconv.Itoa(300<<20)) {
		t.Errorf("the step's memory limit is not the sandbox default of 300 MiB:\n%s", log)
	}
	m := regexp.MustCompile(`SPAWNED=(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no SPAWNED line:\n%s", log)
	}
	if n, _ := strconv.Atoi(m[1]); n >= 64 {
		t.Errorf("a build step started %d processes; the pids limit is 64", n)
	}
	if strings.Contains(log, "HOST-REACHED") || !strings.Contains(log, "HOST-BLOCKED") {
		t.Errorf("a build step reached a host listener:\n%s", log)
	}
	// The build's cgroup parent goes with the build, in every hierarchy:
	// the engine empties it a moment after the build answers, so this
	// waits for it (bounded) rather than looking once.
	waitCgroupGone(t, ctx, parent)
	// A sandbox cannot reach it either: the build is no wider.
	sb, err := d.Client().Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Client().Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", probe}})
	if err != nil || strings.Contains(res.Stdout, "HOST-REACHED") {
		t.Fatalf("a sandbox reached the host listener: %q %v", res.Stdout, err)
	}
}

// dockerBridgeGateway is the host's address on the engine's default bridge,
// which containers there reach.
func dockerBridgeGateway(t *testing.T) string {
	t.Helper()
	ifc, err := net.InterfaceByName("docker0")
	if err != nil {
		t.Fatalf("the engine's default bridge: %v", err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	t.Fatal("docker0 has no IPv4 address")
	return ""
}

// TestBuildLogBounded: a build that prints far more than the log's budget
// keeps its head and its tail within the budget, on disk and in its answer,
// with a line saying what was dropped, and its last lines (where a failure
// says why) are kept.
func TestBuildLogBounded(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--build-log-max-mb", "1"}})
	ctx := ctxFor(t, 4*time.Minute)
	// About 24 MB of output, then a failing step.
	df := "FROM " + testBase + "\nRUN i=0; while [ $i -lt 300000 ]; do echo line-$i-0123456789012345678901234567890123456789012345678901234567890123456789; i=$((i+1)); done; echo LAST-LINE; exit 3\n"
	a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: "noisy", Dockerfile: df}))
	if a.Status != http.StatusAccepted {
		t.Fatalf("build: %d %s", a.Status, a.Body)
	}
	fb := decodeBuild(t, a)
	b := awaitBuild(t, ctx, d, "noisy", fb.Build.ID)
	if b.State != "error" {
		t.Fatalf("the failing build is %s", b.State)
	}
	log := buildLog(t, ctx, d, d.Token, "noisy", fb.Build.ID)
	if len(log) > 2<<20 {
		t.Errorf("the log answer is %d bytes; the budget is 1 MiB", len(log))
	}
	for _, want := range []string{"line-0-", "LAST-LINE", "of build output dropped here", "returned a non-zero code: 3"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	info, err := os.Stat(filepath.Join(d.DataDir, "templates", "logs", fb.Build.ID+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > 1<<20+64<<10 {
		t.Errorf("the log on disk is %d bytes; the budget is 1 MiB", info.Size())
	}
}

// awaitBuildAs waits for a build to end, asking with token.
func awaitBuildAs(t *testing.T, ctx context.Context, d *harness.Daemon, token, tmpl, build string) apitypes.TemplateBuild {
	t.Helper()
	for {
		a := raw(t, ctx, d, token, http.MethodGet, "/v1/templates/"+tmpl+"/builds/"+build, "")
		var b apitypes.TemplateBuild
		if err := json.Unmarshal(a.Body, &b); err != nil || a.Status != http.StatusOK {
			t.Fatalf("get build: %d %s", a.Status, a.Body)
		}
		if b.State == "ready" || b.State == "error" {
			return b
		}
		select {
		case <-ctx.Done():
			t.Fatalf("build %s still %s", build, b.State)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestBuildContextsBounded: uploaded contexts count against the owner's
// quota (an upload past it is 429 and stores nothing), and a template's
// deletion removes its builds' logs and the contexts they used.
func TestBuildContextsBounded(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--build-context-quota-mb", "1"}})
	ctx := ctxFor(t, 3*time.Minute)
	blob := func(seed string) []byte {
		b := make([]byte, 600<<10)
		for i := range b {
			b[i] = seed[i%len(seed)] ^ byte(i>>8)
		}
		return contextTar(t, map[string]string{"data/" + seed: string(b)})
	}
	first := uploadContext(t, ctx, d, blob("first"))
	second := blob("second")
	sum := sha256.Sum256(second)
	a := raw(t, ctx, d, d.Token, http.MethodPut, "/v1/templates/files/"+hex.EncodeToString(sum[:]), string(second))
	if a.Status != http.StatusTooManyRequests || a.Code() != "quota_exceeded" {
		t.Fatalf("an upload past the quota: %d %s", a.Status, a.Body)
	}
	if a := raw(t, ctx, d, d.Token, http.MethodGet, "/v1/templates/files/"+hex.EncodeToString(sum[:]), ""); a.Status != http.StatusNotFound {
		t.Fatalf("the refused upload was stored: %d", a.Status)
	}
	// The same upload again replaces itself and fits.
	uploadContext(t, ctx, d, blob("first"))
	b := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: "ctx", Context: first, Dockerfile: "FROM " + testBase + "\nCOPY data /data\n"}))
	if b.Status != http.StatusAccepted {
		t.Fatalf("build: %d %s", b.Status, b.Body)
	}
	fb := decodeBuild(t, b)
	if got := awaitBuild(t, ctx, d, "ctx", fb.Build.ID); got.State != "ready" {
		t.Fatalf("build: %s %s", got.State, got.Error)
	}
	files, _ := filepath.Glob(filepath.Join(d.DataDir, "templates", "files", "*", first))
	logs, _ := filepath.Glob(filepath.Join(d.DataDir, "templates", "logs", fb.Build.ID+".*"))
	if len(files) != 1 || len(logs) == 0 {
		t.Fatalf("before the delete: contexts %v, logs %v", files, logs)
	}
	if a := mustKeyed(t, ctx, d, http.MethodDelete, "/v1/templates/ctx", ""); a.Status != http.StatusNoContent && a.Status != http.StatusOK {
		t.Fatalf("delete: %d %s", a.Status, a.Body)
	}
	files, _ = filepath.Glob(filepath.Join(d.DataDir, "templates", "files", "*", first))
	logs, _ = filepath.Glob(filepath.Join(d.DataDir, "templates", "logs", fb.Build.ID+".*"))
	if len(files) != 0 || len(logs) != 0 {
		t.Fatalf("the deleted template left contexts %v and logs %v", files, logs)
	}
	// With the first context gone, the second fits.
	uploadContext(t, ctx, d, second)
}

// waitCgroupGone waits until no cgroup hierarchy has the cgroup, failing the
// test if one still does after two minutes.
func waitCgroupGone(t *testing.T, ctx context.Context, cg string) {
	t.Helper()
	deadline := time.Now().Add(2*time.Minute + 10*time.Second)
	for {
		left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cg))
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", cg)); err == nil {
			left = append(left, filepath.Join("/sys/fs/cgroup", cg))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the build's cgroup is left behind: %v", left)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestBuildLeavesNoStepImages: the images a build's steps make and nothing
// keeps are removed when it ends: all of a failed build's (no tag names
// them and the owner's cache never reuses them, so failing builds would
// otherwise fill the engine's disk), and the stages a multi-stage build
// does not end with; the template's image and its chain stay.
func TestBuildLeavesNoStepImages(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 4*time.Minute)
	stepIDs := func(log string) []string {
		var ids []string
		base := false
		for _, raw := range strings.Split(log, "\n") {
			var entry struct{ Message string }
			if json.Unmarshal([]byte(raw), &entry) != nil {
				continue
			}
			line := entry.Message
			switch {
			case regexp.MustCompile(`^Step \d+/\d+ : FROM `).MatchString(line):
				base = true
			case regexp.MustCompile(`^ ---> [0-9a-f]{12}$`).MatchString(line):
				if !base {
					ids = append(ids, strings.TrimPrefix(line, " ---> "))
				}
				base = false
			}
		}
		return ids
	}
	exists := func(id string) bool {
		return exec.Command("docker", "image", "inspect", id).Run() == nil
	}
	build := func(name, df, want string) (string, apitypes.TemplateBuild) {
		a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, apitypes.BuildTemplateRequest{Name: name, Dockerfile: df}))
		if a.Status != http.StatusAccepted {
			t.Fatalf("build %s: %d %s", name, a.Status, a.Body)
		}
		b := awaitBuild(t, ctx, d, name, decodeBuild(t, a).Build.ID)
		log := buildLog(t, ctx, d, d.Token, name, b.ID)
		if b.State != want {
			t.Fatalf("build %s: %s, want %s\n%s", name, b.State, want, log)
		}
		return log, b
	}

	log, _ := build("fails", "FROM "+testBase+"\nRUN echo one > /one\nRUN echo two > /two\nRUN echo about to fail && exit 3\n", "error")
	ids := stepIDs(log)
	if len(ids) < 2 {
		t.Fatalf("the failed build's log names %v as its steps' images:\n%s", ids, log)
	}
	for _, id := range ids {
		if exists(id) {
			t.Errorf("the failed build left its step's image %s", id)
		}
	}

	log, _ = build("stages", "FROM "+testBase+" AS first\nRUN echo staged > /staged\nFROM "+testBase+"\nCOPY --from=first /staged /a\nRUN cat /a\n", "ready")
	ids = stepIDs(log)
	if len(ids) < 3 {
		t.Fatalf("the multi-stage build's log names %v as its steps' images:\n%s", ids, log)
	}
	if exists(ids[0]) {
		t.Errorf("the first stage's image %s is left", ids[0])
	}
	var tmpl apitypes.Template
	if err := json.Unmarshal(mustKeyed(t, ctx, d, http.MethodGet, "/v1/templates/stages", "").Body, &tmpl); err != nil {
		t.Fatal(err)
	}
	if tmpl.Image == "" || !exists(tmpl.Image) {
		t.Fatalf("the template's image %q is gone", tmpl.Image)
	}
	for _, id := range ids[1:] {
		if !exists(id) {
			t.Errorf("image %s of the template's own chain was removed", id)
		}
	}
	// A sandbox runs from it, with what the first stage made.
	sb, err := d.Client().Create(ctx, client.CreateRequest{Template: "stages"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := d.Client().Exec(ctx, sb.ID, client.ExecRequest{Cmd: "cat", Args: []string{"/a"}}); err != nil || strings.TrimSpace(res.Stdout) != "staged" {
		t.Fatalf("cat /a: %+v %v", res, err)
	}
}
