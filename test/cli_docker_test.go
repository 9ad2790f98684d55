package sandpit_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// oneLine checks that a failure printed exactly one line, with the CLI's
// prefix, and none of the HTTP or protocol vocabulary it travelled in.
func oneLine(t *testing.T, what, errOut string) {
	t.Helper()
	if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "sandpit: ") {
		t.Errorf("%s: stderr %q is not one line starting with the prefix", what, errOut)
	}
	for _, raw := range []string{"HTTP status", "404 ", "409 ", `{"code"`, "unknown:", "invalid_argument:", "not_found", "name_conflict"} {
		if strings.Contains(errOut, raw) {
			t.Errorf("%s: stderr %q quotes the transport (%q)", what, errOut, raw)
		}
	}
}

// TestCLIExecExitCodes: exec exits as docker exec does: 125 when the CLI
// or the daemon failed (no such sandbox, a stopped or paused one), 126
// when the program was found but cannot run, 127 when it was not found,
// and otherwise with the command's own code; each refusal is one line in
// words that names the next step.
func TestCLIExecExitCodes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	if _, errOut, code := runCLI(t, ctx, d, nil, "create", "--name", "pz"); code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, ctx, d, []byte("echo hi\n"), "cp", "-", "pz:/tmp/script"); code != 0 {
		t.Fatalf("cp: %d %s", code, errOut)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stderr; "" for a command's own failure
	}{
		{"true", []string{"pz", "--", "true"}, 0, ""},
		{"false", []string{"pz", "--", "false"}, 1, ""},
		{"own code", []string{"pz", "--", "sh", "-c", "exit 3"}, 3, ""},
		{"own 127", []string{"pz", "--", "sh", "-c", "exit 127"}, 127, ""},
		{"not found", []string{"pz", "--", "nosuchprogram"}, 127, "nosuchprogram: executable file not found"},
		{"not found by path", []string{"pz", "--", "/bin/nosuchprogram"}, 127, "/bin/nosuchprogram"},
		{"not executable", []string{"pz", "--", "/tmp/script"}, 126, "/tmp/script: not an executable file"},
		{"a directory", []string{"pz", "--", "/tmp"}, 126, "/tmp: not an executable file"},
		{"no such sandbox", []string{"nosuch", "--", "true"}, 125, "sandpit: no such sandbox: \"nosuch\" (no id, name or id prefix matches)\n"},
	} {
		for _, format := range []string{"text", "json"} {
			_, errOut, code := runCLI(t, ctx, d, nil, append([]string{"-o", format, "exec"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("%s (%s): exit %d, want %d; stderr %q", tc.name, format, code, tc.code, errOut)
				continue
			}
			if tc.want != "" {
				if !strings.Contains(errOut, tc.want) {
					t.Errorf("%s (%s): stderr %q, want %q", tc.name, format, errOut, tc.want)
				}
				oneLine(t, tc.name, errOut)
			}
		}
	}

	for _, tc := range []struct{ verb, undo, state string }{{"stop", "start", "stopped"}, {"pause", "resume", "paused"}} {
		if _, errOut, code := runCLI(t, ctx, d, nil, tc.verb, "pz"); code != 0 {
			t.Fatalf("%s: %d %s", tc.verb, code, errOut)
		}
		_, errOut, code := runCLI(t, ctx, d, nil, "exec", "pz", "--", "true")
		want := "sandpit: sandbox pz is " + tc.state + ": run 'sandpit " + tc.undo + " pz'\n"
		if code != 125 || errOut != want {
			t.Errorf("exec in a %s sandbox: exit %d, stderr %q; want 125 and %q", tc.state, code, errOut, want)
		}
		if _, errOut, code := runCLI(t, ctx, d, nil, tc.undo, "pz"); code != 0 {
			t.Fatalf("%s: %d %s", tc.undo, code, errOut)
		}
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "exec", "pz", "--", "true"); code != 0 {
		t.Fatalf("exec after start: %d %s", code, errOut)
	}
}

// TestCLIDockerHabits: what a docker user types works: ps lists like ls,
// --memory takes docker's units, ls names the template, stats gives the
// sandbox's own CPU share, a taken name names its real holder, a missing
// file is said in words, an unknown image points at templates, and
// logs -f ends when its sandbox goes.
func TestCLIDockerHabits(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--template", "busy=" + testBase}})
	ctx := ctxFor(t, 3*time.Minute)
	id, errOut, code := runCLI(t, ctx, d, nil, "create", "--name", "web", "--template", "busy", "--cpu", "0.5", "--memory", "512m")
	if code != 0 {
		t.Fatalf("create --memory 512m: %d %s", code, errOut)
	}
	id = strings.TrimSpace(id)
	sb, err := d.Client().Get(ctx, id)
	if err != nil || sb.MemoryMB != 512 || sb.CPU != 0.5 || sb.Template != "busy" {
		t.Fatalf("created %+v %v; want 512 MiB, 0.5 CPU, template busy", sb, err)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "update", "--memory", "1g", "web"); code != 0 {
		t.Fatalf("update --memory 1g: %d %s", code, errOut)
	}
	if sb, _ := d.Client().Get(ctx, id); sb.MemoryMB != 1024 {
		t.Fatalf("update --memory 1g: memory %d MiB, want 1024", sb.MemoryMB)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "create", "--memory", "4x"); code != 1 || !strings.Contains(errOut, "512m, 4g") {
		t.Errorf("create --memory 4x: %d %q", code, errOut)
	}

	ls, errOut, code := runCLI(t, ctx, d, nil, "ls")
	if code != 0 || !strings.Contains(ls, "TEMPLATE") || !strings.Contains(ls, "busy") || strings.Contains(ls, testBase) {
		t.Fatalf("ls: %d %q %q; want the template busy and not the image", code, ls, errOut)
	}
	if ps, _, code := runCLI(t, ctx, d, nil, "ps"); code != 0 || ps != ls {
		t.Fatalf("ps: %d %q; want what ls prints:\n%s", code, ps, ls)
	}

	out, errOut, code := runCLI(t, ctx, d, nil, "stats", "web")
	if code != 0 || !strings.Contains(out, "of 0.5 CPU\n") {
		t.Fatalf("stats: %d %q %q; want the sandbox's 0.5 CPU", code, out, errOut)
	}

	_, errOut, code = runCLI(t, ctx, d, nil, "create", "--name", "web")
	if want := "sandpit: name already in use: \"web\" is the name of sandbox " + id + ": remove it ('sandpit rm web') or choose another --name\n"; code != 1 || errOut != want {
		t.Errorf("create of a taken name: %d %q; want %q", code, errOut, want)
	}
	oneLine(t, "name conflict", errOut)

	_, errOut, code = runCLI(t, ctx, d, nil, "cp", "web:/tmp/nosuchfile", "-")
	if code != 1 || !strings.Contains(errOut, "/tmp/nosuchfile") {
		t.Errorf("cp of a missing file: %d %q", code, errOut)
	}
	oneLine(t, "cp of a missing file", errOut)

	_, errOut, code = runCLI(t, ctx, d, nil, "create", "--image", "nosuch-image-of-sandpit-tests")
	if code != 1 || !strings.Contains(errOut, "--template") || !strings.Contains(errOut, "sandpit template ls") {
		t.Errorf("create --image unknown: %d %q; want a hint at templates", code, errOut)
	}
	oneLine(t, "unknown image", errOut)

	// logs -f follows the start command's log and ends when the sandbox is
	// removed, as docker logs -f ends with its container.
	if _, errOut, code := runCLI(t, ctx, d, []byte("first\n"), "cp", "-", "web:"+agentapi.StartLogPath); code != 0 {
		t.Fatalf("cp log: %d %s", code, errOut)
	}
	follow := exec.CommandContext(ctx, sandpitBin, "logs", "-f", "web")
	follow.Env = append(os.Environ(), "SANDPIT_ADDR="+d.Addr, "SANDPIT_TOKEN="+d.Token)
	var fout, ferr lockedBuffer
	follow.Stdout, follow.Stderr = &fout, &ferr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- follow.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); fout.String() != "first\n"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("logs -f printed %q %q", fout.String(), ferr.String())
		}
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "rm", "web"); code != 0 {
		t.Fatalf("rm: %d %s", code, errOut)
	}
	// A generous bound: it proves the follower ends rather than hangs.
	select {
	case err := <-ended:
		if err != nil || !strings.Contains(ferr.String(), "sandbox web was removed") {
			t.Errorf("logs -f after rm: %v %q", err, ferr.String())
		}
	case <-time.After(30 * time.Second):
		_ = follow.Process.Kill()
		t.Fatalf("logs -f kept following a removed sandbox: %q", ferr.String())
	}
}

// TestCLIBuildErrorOnce: a failed template build says why once, in the
// command's error, not again in the log it followed.
func TestCLIBuildErrorOnce(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	bad := writeTree(t, map[string]string{"Dockerfile": "FROM " + testBase + "\nRUN exit 7\n"})
	out, errOut, code := runCLI(t, ctx, d, nil, "template", "build", "--name", "once-bad", bad)
	if code != 1 || strings.Count(errOut, "non-zero code: 7") != 1 {
		t.Fatalf("failing build: exit %d, stdout %q; want exit 1 and the reason once in:\n%s", code, out, errOut)
	}
}
