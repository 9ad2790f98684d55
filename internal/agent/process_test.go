package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	processpb "github.com/sandpit-dev/sandpit/proto/process"
	"github.com/sandpit-dev/sandpit/proto/process/processconnect"
)

func TestStartEcho(t *testing.T) {
	e := newTestEnv(t)
	r := e.run(t, shell("echo hello"))
	wantExit(t, r, 0)
	if r.stdout != "hello\n" || r.stderr != "" {
		t.Fatalf("stdout %q stderr %q, want hello", r.stdout, r.stderr)
	}
	if r.end.GetStatus() != "exit status 0" {
		t.Fatalf("status %q", r.end.GetStatus())
	}
}

func TestStartStderrAndExitCode(t *testing.T) {
	e := newTestEnv(t)
	r := e.run(t, shell("echo e >&2; exit 3"))
	wantExit(t, r, 3)
	if r.stderr != "e\n" || r.stdout != "" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r.end.GetStatus() != "exit status 3" {
		t.Fatalf("status %q", r.end.GetStatus())
	}
}

func TestStartEnvAndCwd(t *testing.T) {
	e := newTestEnv(t, func(c *Config) {
		c.Env["FROM_DEFAULT"] = "default"
		c.Env["OVERRIDDEN"] = "default"
	})
	dir := t.TempDir()
	req := shell(`echo "$FROM_DEFAULT $OVERRIDDEN $FROM_REQUEST"; pwd`)
	req.Process.Envs = map[string]string{"OVERRIDDEN": "request", "FROM_REQUEST": "request"}
	req.Process.Cwd = &dir
	r := e.run(t, req)
	wantExit(t, r, 0)
	want := "default request request\n" + dir + "\n"
	if r.stdout != want {
		t.Fatalf("stdout %q, want %q", r.stdout, want)
	}

	missing := filepath.Join(dir, "missing")
	req = shell("true")
	req.Process.Cwd = &missing
	stream, err := e.proc.Start(t.Context(), connect.NewRequest(req))
	if err == nil {
		r = drain(stream)
		err = r.err
	}
	wantCode(t, err, connect.CodeInvalidArgument)
}

func TestDefaultCwdIsHome(t *testing.T) {
	home := t.TempDir()
	e := newTestEnv(t, func(c *Config) { c.Env["HOME"] = home })
	r := e.run(t, shell("pwd"))
	wantExit(t, r, 0)
	if r.stdout != home+"\n" {
		t.Fatalf("pwd = %q, want %q", r.stdout, home)
	}
}

func TestMainHidesTokenFromProcesses(t *testing.T) {
	t.Setenv(agentapi.TokenEnv, "secret-token")
	t.Setenv("SANDPIT_TEST_DEFAULT", "visible")
	addr := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))

	ctx, cancel := context.WithCancel(t.Context())
	exited := make(chan int, 1)
	go func() { exited <- Main(ctx, []string{"--listen", addr}) }()
	defer func() {
		cancel()
		if code := <-exited; code != 0 {
			t.Errorf("Main exited %d", code)
		}
	}()

	base := "http://" + addr
	testkit.Eventually(t, 5*time.Second, "agent to listen", func() error {
		res, err := http.Get(base + "/health")
		if err != nil {
			return err
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusNoContent {
			return fmt.Errorf("GET /health: %d", res.StatusCode)
		}
		return nil
	})
	hc := &http.Client{Transport: tokenTransport{token: "secret-token", base: http.DefaultTransport}}
	client := processconnect.NewProcessClient(hc, base, connect.WithProtoJSON())
	stream, err := client.Start(t.Context(), connect.NewRequest(shell("env")))
	if err != nil {
		t.Fatal(err)
	}
	r := drain(stream)
	wantExit(t, r, 0)
	if strings.Contains(r.stdout, "secret-token") || strings.Contains(r.stdout, agentapi.TokenEnv) {
		t.Fatalf("the token leaked into the process environment:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "SANDPIT_TEST_DEFAULT=visible") {
		t.Fatalf("the agent's environment is not the default:\n%s", r.stdout)
	}
	if _, ok := os.LookupEnv(agentapi.TokenEnv); ok {
		t.Fatal("Main left the token in its own environment")
	}

	// The token is enforced.
	noToken := processconnect.NewProcessClient(http.DefaultClient, base, connect.WithProtoJSON())
	_, err = noToken.List(t.Context(), connect.NewRequest(&processpb.ListRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated)
}

func TestKillBackgroundProcess(t *testing.T) {
	e := newTestEnv(t)
	stream, pid := e.startBackground(t, t.Context(), shell("sleep 100"))
	defer func() { _ = stream.Close() }()
	if !e.listed(t, pid) {
		t.Fatalf("List does not show pid %d", pid)
	}
	kill(t, e, pid)
	r := drain(stream)
	if r.err != nil {
		t.Fatalf("stream error: %v", r.err)
	}
	if r.end == nil {
		t.Fatalf("no end event after SIGKILL: %v", r.events)
	}
	if r.end.GetExited() || r.end.GetStatus() != "signal: killed" || r.end.GetExitCode() != -1 {
		t.Fatalf("end = %v, want killed", r.end)
	}
	if e.listed(t, pid) {
		t.Fatal("a killed process is still listed")
	}
}

func TestDisconnectKeepsProcessAndConnectReattaches(t *testing.T) {
	e := newTestEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	tag := "bg"
	req := shell("while :; do sleep 0.05; done")
	req.Tag = &tag
	stream, pid := e.startBackground(t, ctx, req)
	cancel()
	_ = stream.Close()
	time.Sleep(200 * time.Millisecond)
	if !e.listed(t, pid) {
		t.Fatal("the process died with its client's stream")
	}

	res, err := e.proc.List(t.Context(), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Msg.GetProcesses() {
		if p.GetPid() == pid && (p.GetTag() != "bg" || p.GetConfig().GetCmd() != "/bin/sh") {
			t.Fatalf("List entry %v", p)
		}
	}

	attached, err := e.proc.Connect(t.Context(), connect.NewRequest(&processpb.ConnectRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "bg"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = attached.Close() }()
	if !attached.Receive() || attached.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("Connect did not start with the pid: %v %v", attached.Msg(), attached.Err())
	}
	kill(t, e, pid)
	r := drainConnect(attached)
	if r.err != nil || r.end == nil {
		t.Fatalf("Connect stream ended without end: %v %v", r.events, r.err)
	}

	gone, err := e.proc.Connect(t.Context(), connect.NewRequest(&processpb.ConnectRequest{Process: pidSel(pid)}))
	if err == nil {
		err = drainConnect(gone).err
	}
	wantCode(t, err, connect.CodeNotFound)
}

func TestStdin(t *testing.T) {
	e := newTestEnv(t)
	yes := true
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "cat"}, Stdin: &yes}
	stream, pid := e.startBackground(t, t.Context(), req)
	defer func() { _ = stream.Close() }()
	for _, chunk := range []string{"abc\n", "def\n"} {
		_, err := e.proc.SendInput(t.Context(), connect.NewRequest(&processpb.SendInputRequest{
			Process: pidSel(pid),
			Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte(chunk)}},
		}))
		if err != nil {
			t.Fatalf("SendInput: %v", err)
		}
	}
	if _, err := e.proc.CloseStdin(t.Context(), connect.NewRequest(&processpb.CloseStdinRequest{Process: pidSel(pid)})); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	r := drain(stream)
	if r.err != nil || r.end.GetExitCode() != 0 || r.stdout != "abc\ndef\n" {
		t.Fatalf("stdout %q end %v err %v", r.stdout, r.end, r.err)
	}
}

func TestNoStdinMeansDevNull(t *testing.T) {
	e := newTestEnv(t)
	no := false
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "cat"}, Stdin: &no}
	r := e.run(t, req)
	wantExit(t, r, 0)

	stream, pid := e.startBackground(t, t.Context(), shell("sleep 100"))
	defer func() { _ = stream.Close() }()
	defer kill(t, e, pid)
	_, err := e.proc.SendInput(t.Context(), connect.NewRequest(&processpb.SendInputRequest{
		Process: pidSel(pid),
		Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("x")}},
	}))
	wantCode(t, err, connect.CodeFailedPrecondition)
}

func TestPTY(t *testing.T) {
	e := newTestEnv(t)
	req := &processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh"},
		Pty:     &processpb.PTY{Size: &processpb.PTY_Size{Cols: 100, Rows: 30}},
	}
	stream, pid := e.startBackground(t, t.Context(), req)
	defer func() { _ = stream.Close() }()

	if _, err := e.proc.Update(t.Context(), connect.NewRequest(&processpb.UpdateRequest{
		Process: pidSel(pid),
		Pty:     &processpb.PTY{Size: &processpb.PTY_Size{Cols: 120, Rows: 40}},
	})); err != nil {
		t.Fatalf("Update: %v", err)
	}
	input := "tty >/dev/null && echo is-a-tty; stty size; echo sum-$((40+2)); exit 7\n"
	if _, err := e.proc.SendInput(t.Context(), connect.NewRequest(&processpb.SendInputRequest{
		Process: pidSel(pid),
		Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte(input)}},
	})); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	r := drain(stream)
	if r.err != nil || r.end == nil || r.end.GetExitCode() != 7 {
		t.Fatalf("end %v err %v output %q", r.end, r.err, r.pty)
	}
	for _, want := range []string{"is-a-tty", "40 120", "sum-42"} {
		if !strings.Contains(r.pty, want) {
			t.Fatalf("pty output %q lacks %q", r.pty, want)
		}
	}
	if r.stdout != "" || r.stderr != "" {
		t.Fatalf("a PTY process sent stdout/stderr events: %q %q", r.stdout, r.stderr)
	}
}

func TestKeepalive(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.KeepaliveInterval = 50 * time.Millisecond })
	r := e.run(t, shell("sleep 0.4; echo done"))
	wantExit(t, r, 0)
	if r.keeps == 0 {
		t.Fatalf("no keepalive on a silent command: %v", r.events)
	}
}

func TestDeadlineKillsProcess(t *testing.T) {
	e := newTestEnv(t)
	marker := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	stream, err := e.proc.Start(ctx, connect.NewRequest(shell("echo $$ >"+marker+"; exec sleep 100")))
	if err != nil {
		t.Fatal(err)
	}
	r := drain(stream)
	wantCode(t, r.err, connect.CodeDeadlineExceeded)
	if r.pid == 0 {
		t.Fatalf("no start event before the deadline: %v", r.events)
	}
	testkit.Eventually(t, 5*time.Second, "the process to be killed", func() error {
		if e.listed(t, r.pid) {
			return fmt.Errorf("pid %d is still listed", r.pid)
		}
		return nil
	})
}

func TestStartBadCommand(t *testing.T) {
	e := newTestEnv(t)
	stream, err := e.proc.Start(t.Context(), connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "definitely-not-a-command"},
	}))
	if err == nil {
		err = drain(stream).err
	}
	wantCode(t, err, connect.CodeInvalidArgument)

	_, err = e.proc.SendSignal(t.Context(), connect.NewRequest(&processpb.SendSignalRequest{
		Process: pidSel(999999), Signal: processpb.Signal_SIGNAL_SIGKILL,
	}))
	wantCode(t, err, connect.CodeNotFound)
}

func TestAuth(t *testing.T) {
	e := newTestEnv(t)
	noToken := processconnect.NewProcessClient(http.DefaultClient, e.srv.URL, connect.WithProtoJSON())
	_, err := noToken.List(t.Context(), connect.NewRequest(&processpb.ListRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated)

	stream, err := noToken.Start(t.Context(), connect.NewRequest(shell("echo hello")))
	if err == nil {
		r := drain(stream)
		if r.pid != 0 {
			t.Fatal("an unauthenticated Start ran a process")
		}
		err = r.err
	}
	wantCode(t, err, connect.CodeUnauthenticated)

	for _, path := range []string{"/files?path=/etc/hostname", "/process.Process/List"} {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
		req.Header.Set(agentapi.AccessTokenHeader, "wrong")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s with a wrong token: %d", path, res.StatusCode)
		}
	}

	res, err := http.Get(e.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("/health without a token: %d", res.StatusCode)
	}

	// A user hint for a user that does not exist is ignored, never an error.
	hinted := &http.Client{Transport: basicAuthTransport{user: "no-such-user-here", base: e.http.Transport}}
	client := processconnect.NewProcessClient(hinted, e.srv.URL, connect.WithProtoJSON())
	stream, err = client.Start(t.Context(), connect.NewRequest(shell("echo ok")))
	if err != nil {
		t.Fatal(err)
	}
	wantExit(t, drain(stream), 0)
}

type basicAuthTransport struct {
	user string
	base http.RoundTripper
}

func (t basicAuthTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(t.user, "")
	return t.base.RoundTrip(r)
}

func TestBackgroundChildDoesNotHoldStreamOpen(t *testing.T) {
	e := newTestEnv(t)
	began := time.Now()
	// The background sleep inherits stdout; the stream must still end soon
	// after the shell exits, with the shell's output intact.
	r := e.run(t, shell("sleep 5 & echo started"))
	wantExit(t, r, 0)
	if r.stdout != "started\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	if took := time.Since(began); took > 4*time.Second {
		t.Fatalf("stream waited %v for the background child", took)
	}
}

func TestLargeOutputIsComplete(t *testing.T) {
	e := newTestEnv(t)
	began := time.Now()
	r := e.run(t, shell("seq 1 50000"))
	t.Logf("%d events in %v", len(r.events), time.Since(began))
	wantExit(t, r, 0)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 50000 || lines[0] != "1" || lines[len(lines)-1] != "50000" {
		t.Fatalf("got %d lines, first %q last %q", len(lines), lines[0], lines[len(lines)-1])
	}
}

// TestMainRefusesEmptyToken: an agent without a token would serve anyone who
// reaches its port, so it refuses to start, with the token unset or empty.
func TestMainRefusesEmptyToken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value string
		set   bool
	}{{"unset", "", false}, {"empty", "", true}, {"blank", "  ", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.set {
				t.Setenv(agentapi.TokenEnv, tc.value)
			} else {
				t.Setenv(agentapi.TokenEnv, "x")
				os.Unsetenv(agentapi.TokenEnv)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if code := Main(ctx, []string{"--listen", "127.0.0.1:0"}); code == 0 {
				t.Fatal("Main served without a token")
			}
		})
	}
}
