package sandpit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestCLINamesAndPrefixes: every command that takes a sandbox takes its
// name or an unambiguous prefix of its id, as docker takes containers; one
// that names no sandbox, or several, says so and changes nothing.
func TestCLINamesAndPrefixes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	out, errOut, code := runCLI(t, ctx, d, nil, "create", "--name", "demo")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	prefix := id[:len(id)-4]

	for _, ref := range []string{"demo", prefix, id} {
		if out, errOut, code := runCLI(t, ctx, d, nil, "exec", ref, "--", "echo", "via "+ref); code != 0 || out != "via "+ref+"\n" {
			t.Fatalf("exec %s: %d %q %q", ref, code, out, errOut)
		}
	}
	inspect := func() client.Sandbox {
		t.Helper()
		out, errOut, code := runCLI(t, ctx, d, nil, "inspect", "demo")
		var sb client.Sandbox
		if code != 0 || json.Unmarshal([]byte(out), &sb) != nil {
			t.Fatalf("inspect demo: %d %q %q", code, out, errOut)
		}
		return sb
	}
	if sb := inspect(); sb.ID != id || sb.Name != "demo" {
		t.Fatalf("inspect demo = %+v, want id %s", sb, id)
	}
	for _, step := range []struct {
		args  []string
		state string
	}{
		{[]string{"stop", "demo"}, "stopped"},
		{[]string{"start", prefix}, "running"},
		{[]string{"pause", "demo"}, "paused"},
		{[]string{"resume", "demo"}, "running"},
	} {
		out, errOut, code := runCLI(t, ctx, d, nil, step.args...)
		if code != 0 || strings.TrimSpace(out) != id {
			t.Fatalf("%v: %d %q %q, want the id printed", step.args, code, out, errOut)
		}
		if sb := inspect(); string(sb.State) != step.state {
			t.Fatalf("after %v: state %s, want %s", step.args, sb.State, step.state)
		}
	}
	if _, errOut, code := runCLI(t, ctx, d, []byte("named\n"), "cp", "-", "demo:/tmp/by-name"); code != 0 {
		t.Fatalf("cp to demo: %d %s", code, errOut)
	}
	if out, _, code := runCLI(t, ctx, d, nil, "cp", prefix+":/tmp/by-name", "-"); code != 0 || out != "named\n" {
		t.Fatalf("cp from a prefix: %d %q", code, out)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "ports", "demo"); code != 0 {
		t.Fatalf("ports demo: %d %s", code, errOut)
	}

	// Refused, naming what was typed, with nothing done.
	second, _, _ := runCLI(t, ctx, d, nil, "create")
	common := commonPrefix(id, strings.TrimSpace(second))
	for _, tc := range []struct {
		args []string
		code int // exec exits 125 for its own failures, as docker exec does
		want string
	}{
		{[]string{"exec", "nosuch", "--", "true"}, 125, "sandpit: no such sandbox: \"nosuch\" (no id, name or id prefix matches)\n"},
		{[]string{"stop", "nosuch"}, 1, "sandpit: no such sandbox: \"nosuch\" (no id, name or id prefix matches)\n"},
		{[]string{"rm", "nosuch"}, 1, "sandpit: no such sandbox: \"nosuch\" (no id, name or id prefix matches)\n"},
		{[]string{"inspect", common}, 1, "is ambiguous: it matches sandboxes"},
	} {
		_, errOut, code := runCLI(t, ctx, d, nil, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Fatalf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	if sb := inspect(); sb.State != "running" {
		t.Fatalf("a refused command changed the sandbox: %+v", sb)
	}
	if out, errOut, code := runCLI(t, ctx, d, nil, "rm", "demo"); code != 0 || strings.TrimSpace(out) != "demo" {
		t.Fatalf("rm demo: %d %q %q", code, out, errOut)
	}
	if _, err := d.Client().Get(ctx, id); err == nil {
		t.Fatal("rm demo left the sandbox")
	}
}

func commonPrefix(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return a[:i]
}

// TestCLIExecStdin: piped input reaches the command, and its exit code is
// the CLI's.
func TestCLIExecStdin(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	if _, errOut, code := runCLI(t, ctx, d, nil, "create", "--name", "demo"); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		out   string
		code  int
	}{
		{"script on stdin", "echo hi\nexit 3\n", []string{"sh"}, "hi\n", 3},
		{"data through a filter", "b\na\nc\n", []string{"sort"}, "a\nb\nc\n", 0},
		{"no input", "", []string{"cat"}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"exec", "demo", "--"}, tc.args...)
			out, errOut, code := runCLI(t, ctx, d, []byte(tc.stdin), args...)
			if out != tc.out || code != tc.code {
				t.Fatalf("exec %v <<< %q: %d %q %q, want %d %q", tc.args, tc.stdin, code, out, errOut, tc.code, tc.out)
			}
		})
	}
}

// TestCLIExecTTY drives `sandpit exec -it` through a pseudo-terminal: the
// command sees a terminal, follows a resize, and Ctrl-C interrupts what runs
// in it without ending the shell.
func TestCLIExecTTY(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	if _, errOut, code := runCLI(t, ctx, d, nil, "create", "--name", "demo"); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	cmd := exec.CommandContext(ctx, sandpitBin, "exec", "-it", "demo", "--", "sh")
	cmd.Env = append(os.Environ(), "SANDPIT_ADDR="+d.Addr, "SANDPIT_TOKEN="+d.Token)
	term, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	var mu sync.Mutex
	var screen bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := term.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	seen := func(what string) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			if !strings.Contains(screen.String(), what) {
				return io.ErrUnexpectedEOF
			}
			return nil
		}
	}
	send := func(s string) {
		if _, err := term.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send("tty && echo TTY-$((6*7))\r")
	testkit.Eventually(t, 20*time.Second, "tty output", seen("TTY-42"))
	if !strings.Contains(screen.String(), "/dev/pts/") {
		t.Fatalf("the command saw no terminal:\n%s", screen.String())
	}
	send("stty size | sed 's/ /x/; s/^/SIZE-/'\r")
	testkit.Eventually(t, 20*time.Second, "initial size", seen("SIZE-30x100"))
	if err := pty.Setsize(term, &pty.Winsize{Cols: 120, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	// The resize reaches the sandbox's terminal asynchronously: ask until
	// it shows.
	testkit.Eventually(t, 20*time.Second, "resized", func() error {
		send("stty size | sed 's/ /x/; s/^/SIZE-/'\r")
		time.Sleep(200 * time.Millisecond)
		return seen("SIZE-40x120")()
	})
	send("sleep 60; echo SLEPT-$((2*2))\r")
	time.Sleep(500 * time.Millisecond)
	send("\x03")
	send("echo AFTER-$((40+2))\r")
	testkit.Eventually(t, 20*time.Second, "shell after Ctrl-C", seen("AFTER-42"))
	if strings.Contains(screen.String(), "SLEPT-4") {
		t.Fatal("Ctrl-C did not interrupt the sleep")
	}
	send("exit 5\r")
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("exec -it exited with %v, want status 5\n%s", err, screen.String())
	}
}

// TestCLIStats: `sandpit stats` prints a running sandbox's use with units
// and its limits, as JSON with --output json, and refuses a stopped one
// (whose engine sample would read as an idle sandbox) with exit 1; another
// owner's token and an unknown id get 404.
func TestCLIStats(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	created, errOut, code := runCLI(t, ctx, d, nil, "create", "--name", "st", "--cpu", "1", "--memory", "256")
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	id := strings.TrimSpace(created)
	// Another owner's token, even one that may read, does not see it; an
	// unknown id is 404 too.
	others, _ := ownerTokens(t, ctx, d.Client(), "stranger")
	if _, err := client.New(d.URL(), others["stranger"]).Stats(ctx, id); !client.IsCode(err, apitypes.CodeNotFound) {
		t.Fatalf("stats with another owner's token: %v, want not_found", err)
	}
	if _, err := d.Client().Stats(ctx, "sbnosuch"); !client.IsCode(err, apitypes.CodeNotFound) {
		t.Fatalf("stats of an unknown sandbox: %v, want not_found", err)
	}
	out, errOut, code := runCLI(t, ctx, d, nil, "stats", "st")
	text := regexp.MustCompile(`^CPU +[0-9.]+% of 1 CPU\nMEMORY +[0-9.]+ [KMG]?i?B of 256\.0 MiB \([0-9]+%\)\nDISK +[0-9.]+ [KMG]?i?B`)
	if code != 0 || !text.MatchString(out) {
		t.Fatalf("stats st: %d %q %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, ctx, d, nil, "--output", "json", "stats", "st")
	var st client.Stats
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("stats -o json: %d %q %q", code, out, errOut)
	}
	if st.CPUCount != 1 || st.MemoryLimitBytes != 256<<20 || st.MemoryUsedBytes <= 0 || st.Time.IsZero() {
		t.Fatalf("stats: %+v", st)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "stop", "st"); code != 0 {
		t.Fatalf("stop: %s", errOut)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "stats", "st"); code != 1 || !strings.Contains(errOut, "is stopped") {
		t.Fatalf("stats of a stopped sandbox: exit %d, %q", code, errOut)
	}
}

// TestCLILogs: `sandpit logs` prints what a template's start command wrote,
// and with -f keeps printing what it writes next; a sandbox without a start
// command says it has none, exit 1.
func TestCLILogs(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 3*time.Minute)
	req := apitypes.BuildTemplateRequest{
		Name:       "ticker",
		Dockerfile: "FROM " + testBase + "\n",
		// It prints one line, then a line each time a file appears, so the
		// test decides when the next line comes.
		StartCmd: `echo started; while :; do if [ -e /tmp/next ]; then rm /tmp/next; echo next-line; fi; sleep 0.1; done`,
		ReadyCmd: "true",
	}
	b := decodeBuild(t, mustKeyed(t, ctx, d, http.MethodPost, "/v1/templates", buildBody(t, req), "ticker-1"))
	if got := awaitBuild(t, ctx, d, "ticker", b.Build.ID); got.State != "ready" {
		t.Fatalf("build: %s %s", got.State, got.Error)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "create", "--name", "tick", "--template", "ticker"); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, errOut, code := runCLI(t, ctx, d, nil, "logs", "tick")
		if code == 0 && out == "started\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs tick: %d %q %q", code, out, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	follow := exec.CommandContext(fctx, sandpitBin, "logs", "-f", "tick")
	follow.Env = append(os.Environ(), "SANDPIT_ADDR="+d.Addr, "SANDPIT_TOKEN="+d.Token)
	pipe, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follow.Wait() }()
	lines := bufio.NewScanner(pipe)
	if !lines.Scan() || lines.Text() != "started" {
		t.Fatalf("logs -f first line: %q %v", lines.Text(), lines.Err())
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "exec", "tick", "--", "touch", "/tmp/next"); code != 0 {
		t.Fatalf("exec: %s", errOut)
	}
	if !lines.Scan() || lines.Text() != "next-line" {
		t.Fatalf("logs -f did not follow: %q %v", lines.Text(), lines.Err())
	}
	cancel()

	if _, errOut, code := runCLI(t, ctx, d, nil, "create", "--name", "plain"); code != 0 {
		t.Fatalf("create plain: %s", errOut)
	}
	if _, errOut, code := runCLI(t, ctx, d, nil, "logs", "plain"); code != 1 || !strings.Contains(errOut, "has no start command") {
		t.Fatalf("logs of a sandbox without a start command: %d %q", code, errOut)
	}
}
