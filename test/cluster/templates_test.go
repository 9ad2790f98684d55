package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
)

// startRegistry runs Debian's docker-registry on a free loopback port with
// its own storage in a temporary directory, and stops it (by its pid) and
// removes every image tagged under it when the test ends. The engine takes a
// registry on 127.0.0.0/8 without TLS.
func startRegistry(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker-registry not installed (apt-get install docker-registry): %v", err)
		}
		t.Skipf("docker-registry not installed (apt-get install docker-registry): %v", err)
	}
	addr := loopback(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	conf := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfg)
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
		// The images the nodes built, pushed and pulled under the registry.
		out, _ := exec.Command("docker", "images", "--format", "{{.Repository}}:{{.Tag}}").Output()
		for _, ref := range strings.Fields(string(out)) {
			if strings.HasPrefix(ref, addr+"/") {
				_ = exec.Command("docker", "rmi", "-f", ref).Run()
			}
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("docker-registry did not answer on %s: %v\n%s", addr, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// buildTemplate sends POST /v1/templates to n and waits, through waitOn,
// until the build is ready.
func buildTemplate(t *testing.T, ctx context.Context, n, waitOn *node, req apitypes.BuildTemplateRequest) apitypes.BuildTemplateResponse {
	t.Helper()
	body, _ := json.Marshal(req)
	a := call(ctx, n, http.MethodPost, "/v1/templates", string(body), nil)
	if a.Err != nil || a.Status != http.StatusAccepted {
		t.Fatalf("build on %s: %d %s %v", n.name, a.Status, a.Body, a.Err)
	}
	var out apitypes.BuildTemplateResponse
	if err := json.Unmarshal(a.Body, &out); err != nil {
		t.Fatal(err)
	}
	path := "/v1/templates/" + req.Name + "/builds/" + out.Build.ID
	for {
		a := call(ctx, waitOn, http.MethodGet, path, "", nil)
		var b apitypes.TemplateBuild
		if a.Status == http.StatusOK && json.Unmarshal(a.Body, &b) == nil && (b.State == "ready" || b.State == "error") {
			if b.State != "ready" {
				t.Fatalf("build %s: %+v", out.Build.ID, b)
			}
			out.Build = b
			return out
		}
		if a.Status != http.StatusOK {
			t.Fatalf("build status through %s: %d %s %v", waitOn.name, a.Status, a.Body, a.Err)
		}
		if ctx.Err() != nil {
			t.Fatalf("build %s did not end: %s", out.Build.ID, a.Body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func templateDockerfile(marker string) string {
	return "FROM sandpit/base:test\nRUN echo " + marker + " > /template-marker\n"
}

// A template built on n1 starts a sandbox on n3, which pulls its image from
// the registry; its name is the owner's across the cluster, so a build of
// the same name through another node lands on the same template.
func TestClusterTemplateBuiltOnOneNodeRunsOnAnother(t *testing.T) {
	reg := startRegistry(t)
	c := startClusterWith(t, func(string) []string { return []string{"--registry", reg} })
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	marker := fmt.Sprintf("built-on-n1-%d", time.Now().UnixNano())
	req := apitypes.BuildTemplateRequest{Name: "clustered", Dockerfile: templateDockerfile(marker), Tags: []string{"v1"}}
	// The build's status is served from any node: n3 asks n1, which runs it.
	built := buildTemplate(t, ctx, n1, n3, req)
	if !strings.HasPrefix(built.Build.Image, reg+"/sandpit-template/") {
		t.Fatalf("image %q is not under the registry %s", built.Build.Image, reg)
	}
	logs := call(ctx, n3, http.MethodGet, "/v1/templates/clustered/builds/"+built.Build.ID+"/logs", "", nil)
	if logs.Status != http.StatusOK || !strings.Contains(string(logs.Body), "pushing to "+reg) {
		t.Fatalf("build log through n3: %d %s", logs.Status, logs.Body)
	}

	// Every node finds the template by name.
	for _, n := range c.nodes {
		a := call(ctx, n, http.MethodGet, "/v1/templates/clustered", "", nil)
		var got apitypes.Template
		if a.Status != http.StatusOK || json.Unmarshal(a.Body, &got) != nil || got.ID != built.Template.ID || got.Image != built.Build.Image {
			t.Fatalf("GET template on %s: %d %s", n.name, a.Status, a.Body)
		}
	}

	// The same name built through n2 is the same template, not a second.
	again := buildTemplate(t, ctx, n2, n2, req)
	if again.Template.ID != built.Template.ID {
		t.Fatalf("a build of the same name on n2 made template %s, not %s", again.Template.ID, built.Template.ID)
	}
	a := call(ctx, n3, http.MethodGet, "/v1/templates", "", nil)
	var list apitypes.ListTemplatesResponse
	if a.Status != http.StatusOK || json.Unmarshal(a.Body, &list) != nil {
		t.Fatalf("list on n3: %d %s", a.Status, a.Body)
	}
	named := 0
	for _, tp := range list.Templates {
		if tp.Name == "clustered" {
			named++
		}
	}
	if named != 1 {
		t.Fatalf("n3 lists %d templates named clustered: %s", named, a.Body)
	}

	// The engine is shared by the three nodes: removing the image makes n3
	// pull it from the registry, as a node on its own engine would.
	if out, err := exec.Command("docker", "rmi", "-f", built.Build.Image).CombinedOutput(); err != nil {
		t.Fatalf("docker rmi %s: %v %s", built.Build.Image, err, out)
	}
	// Only n3 takes new sandboxes.
	for _, n := range []string{"n1", "n2"} {
		if a := call(ctx, n1, http.MethodPost, "/v1/cluster/drain", `{"node":"`+n+`","drain":true}`, nil); a.Status >= 300 {
			t.Fatalf("drain %s: %d %s", n, a.Status, a.Body)
		}
	}
	// By its tag, which the index carries too.
	sb, err := n1.Client().Create(ctx, client.CreateRequest{Template: "clustered:v1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n1.Client().Delete(context.Background(), sb.ID) })
	if sb.Node != "n3" {
		t.Fatalf("the sandbox runs on %q, not on n3", sb.Node)
	}
	res, err := n2.Client().Exec(ctx, sb.ID, client.ExecRequest{Cmd: "cat", Args: []string{"/template-marker"}})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != marker {
		t.Fatalf("cat /template-marker in the sandbox on n3: %+v %v", res, err)
	}
	if err := exec.Command("docker", "image", "inspect", built.Build.Image).Run(); err != nil {
		t.Fatalf("n3 did not pull %s: %v", built.Build.Image, err)
	}

	// A delete through n3, which never had the template's rows, deletes it
	// for the cluster: n2, whose build left rows, no longer creates from it.
	for _, n := range []string{"n1", "n2"} {
		if a := call(ctx, n1, http.MethodPost, "/v1/cluster/drain", `{"node":"`+n+`","drain":false}`, nil); a.Status >= 300 {
			t.Fatalf("undrain %s: %d %s", n, a.Status, a.Body)
		}
	}
	if a := call(ctx, n3, http.MethodDelete, "/v1/templates/clustered", "", nil); a.Status != http.StatusNoContent {
		t.Fatalf("delete through n3: %d %s", a.Status, a.Body)
	}
	// Each node reads its own copy of the index, which applies the delete
	// within the replication delay.
	for _, n := range c.nodes {
		deadline := time.Now().Add(10 * time.Second)
		for {
			a := call(ctx, n, http.MethodGet, "/v1/templates/clustered", "", nil)
			if a.Status == http.StatusNotFound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET the deleted template on %s: %d %s", n.name, a.Status, a.Body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if a := call(ctx, n2, http.MethodPost, "/v1/sandboxes", `{"template":"clustered"}`, map[string]string{"Idempotency-Key": "after-delete-" + marker}); a.Status < 400 {
		t.Fatalf("a create from the deleted template through n2: %d %s", a.Status, a.Body)
	}
}

// Without a registry an image stays on the node that built it, so creates
// from the template are placed there, whichever node they reach.
func TestClusterTemplateWithoutRegistryIsPlacedOnItsBuilder(t *testing.T) {
	c := startCluster(t)
	n1, n3 := c.nodes[0], c.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	marker := fmt.Sprintf("local-to-n1-%d", time.Now().UnixNano())
	buildTemplate(t, ctx, n1, n3, apitypes.BuildTemplateRequest{Name: "local", Dockerfile: templateDockerfile(marker)})
	for i := range 4 {
		sb, err := n3.Client().Create(ctx, client.CreateRequest{Template: "local"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n3.Client().Delete(context.Background(), sb.ID) })
		if sb.Node != "n1" {
			t.Fatalf("create %d from the template runs on %q, not on n1 where its image is", i, sb.Node)
		}
	}
}

// TestClusterVolumeCreatesArePlacedOnItsNode: a volume lives on the node it
// was made on, and creates that mount it, sent to another node, run on
// that node with its files; a create mounting a volume no node holds is
// refused.
func TestClusterVolumeCreatesArePlacedOnItsNode(t *testing.T) {
	c := startCluster(t)
	n1, n3 := c.nodes[0], c.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := n1.Client().CreateVolume(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n1.Client().DeleteVolume(context.Background(), "shared") })
	mount := []client.VolumeMount{{Volume: "shared", Path: "/data"}}
	var ids []string
	for i := range 3 {
		sb, err := n3.Client().Create(ctx, client.CreateRequest{Volumes: mount, Labels: map[string]string{"i": fmt.Sprint(i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		t.Cleanup(func() { _ = n3.Client().Delete(context.Background(), sb.ID) })
		if sb.Node != "n1" {
			t.Fatalf("create %d mounting the volume runs on %q, not on n1 where the volume is", i, sb.Node)
		}
	}
	if res, err := n3.Client().Exec(ctx, ids[0], client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo shared > /data/f"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write on the volume: %+v %v", res, err)
	}
	if res, err := n3.Client().Exec(ctx, ids[1], client.ExecRequest{Cmd: "cat", Args: []string{"/data/f"}}); err != nil || res.Stdout != "shared\n" {
		t.Fatalf("read on the volume from another sandbox: %q %v", res.Stdout, err)
	}
	_, err := n3.Client().Create(ctx, client.CreateRequest{Volumes: []client.VolumeMount{{Volume: "nowhere", Path: "/data"}}})
	if !client.IsCode(err, apitypes.CodeNotFound) {
		t.Fatalf("a create mounting a volume no node holds: %v", err)
	}
}
