package sandpit_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// writeTree writes files (name -> content; content "-> target" makes a
// symlink) under a new directory and returns it.
func writeTree(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(body, "-> "); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestCLITemplateBuildCreateRemove: `sandpit template build DIR` archives the
// directory (symlinks kept, .dockerignore honoured), builds it following the
// log, `template ls` shows it ready, `create --template` runs a sandbox of
// it that sees what the build wrote and started, `template rm` removes it;
// a failing build exits non-zero with the engine's message.
func TestCLITemplateBuildCreateRemove(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 4*time.Minute)

	dir := writeTree(t, map[string]string{
		"Dockerfile": "FROM sandpit/base:test\n" +
			"RUN echo built-by-template > /built.txt\n" +
			"COPY . /ctx/\n" +
			"RUN cat /ctx/hello.txt >> /built.txt\n",
		"hello.txt":     "hello from the context\n",
		"link":          "-> hello.txt",
		"secret.txt":    "must not be uploaded\n",
		".dockerignore": "secret.txt\n",
	})
	out, errOut, code := runCLI(t, ctx, d, nil, "template", "build", "--name", "cli-tpl", "--tag", "v1",
		"--start-cmd", "echo started > /tmp/started", "--ready-cmd", "test -f /tmp/started", dir)
	if code != 0 {
		t.Fatalf("template build exited %d:\n%s\n%s", code, out, errOut)
	}
	if strings.TrimSpace(out) != "cli-tpl" {
		t.Fatalf("template build printed %q, want the template's name", out)
	}
	if !strings.Contains(errOut, "built ") {
		t.Fatalf("template build did not follow the build's log to stderr:\n%s", errOut)
	}

	out, _, code = runCLI(t, ctx, d, nil, "template", "ls")
	if code != 0 || !strings.Contains(out, "cli-tpl") || !strings.Contains(out, "ready") {
		t.Fatalf("template ls (%d):\n%s", code, out)
	}
	out, _, code = runCLI(t, ctx, d, nil, "-o", "json", "template", "ls")
	var ts []client.Template
	if err := json.Unmarshal([]byte(out), &ts); code != 0 || err != nil || len(ts) != 1 || ts[0].Build == nil || ts[0].Build.State != "ready" || ts[0].Tags["v1"] == "" {
		t.Fatalf("template ls -o json (%d, %v):\n%s", code, err, out)
	}

	for _, ref := range []string{"cli-tpl", "cli-tpl:v1"} {
		out, errOut, code = runCLI(t, ctx, d, nil, "create", "--template", ref)
		if code != 0 {
			t.Fatalf("create --template %s exited %d: %s", ref, code, errOut)
		}
		id := strings.TrimSpace(out)
		script := "cat /built.txt; readlink /ctx/link; test -e /ctx/secret.txt && echo secret-uploaded; cat /tmp/started"
		out, errOut, code = runCLI(t, ctx, d, nil, "exec", id, "--", "sh", "-c", script)
		if want := "built-by-template\nhello from the context\nhello.txt\nstarted\n"; code != 0 || out != want {
			t.Fatalf("exec in a sandbox of %s = %q %q %d, want %q", ref, out, errOut, code, want)
		}
		if _, errOut, code := runCLI(t, ctx, d, nil, "rm", id); code != 0 {
			t.Fatalf("rm: %s", errOut)
		}
	}

	if out, errOut, code := runCLI(t, ctx, d, nil, "template", "rm", "cli-tpl"); code != 0 || strings.TrimSpace(out) != "cli-tpl" {
		t.Fatalf("template rm = %q %q %d", out, errOut, code)
	}
	if out, _, _ := runCLI(t, ctx, d, nil, "template", "ls"); strings.Contains(out, "cli-tpl") {
		t.Fatalf("template ls after rm:\n%s", out)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "create", "--template", "cli-tpl"); code == 0 || !strings.Contains(errOut, "template") {
		t.Fatalf("create from a removed template = %d %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "template", "rm", "cli-tpl"); code == 0 || !strings.Contains(errOut, "cli-tpl") || strings.Contains(errOut, "not_found") {
		t.Fatalf("template rm again = %d %s", code, errOut)
	}

	// A failing step: the command exits non-zero with the engine's reason,
	// and the template is left in error.
	bad := writeTree(t, map[string]string{"Dockerfile": "FROM sandpit/base:test\nRUN echo about to fail; exit 7\n"})
	out, errOut, code = runCLI(t, ctx, d, nil, "template", "build", "--name", "cli-bad", bad)
	if code == 0 || !strings.Contains(errOut, "non-zero code: 7") || !strings.Contains(errOut, "about to fail") {
		t.Fatalf("failing template build = %d\n%s\n%s", code, out, errOut)
	}
	out, _, _ = runCLI(t, ctx, d, nil, "template", "ls")
	if !strings.Contains(out, "cli-bad") || !strings.Contains(out, "error") {
		t.Fatalf("template ls after a failed build:\n%s", out)
	}
}
