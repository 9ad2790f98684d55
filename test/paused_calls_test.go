package sandpit_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// atOnce bounds a call that must be answered from the sandbox's state
// rather than sent to a frozen container: the acceptance asks for 1 s, and
// the bound is that on an idle machine, with room for a loaded CI machine
// running the race detector (a hanging call took 10 s to minutes).
const atOnce = 2 * time.Second

// rawCall sends one request and returns its status and body, failing the
// test if the answer took longer than atOnce.
func rawCall(t *testing.T, ctx context.Context, method, url string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if took := time.Since(t0); took > atOnce {
		t.Errorf("%s %s answered after %s, want at once", method, url, took)
	}
	return resp.StatusCode, string(b)
}

// TestPausedAndStoppedAnswerAtOnce: every call that needs a running sandbox
// answers a paused or stopped one at once with the typed error, on /v1
// (exec, files, the agent stream, PTY), on Daytona's toolbox in its shape,
// on E2B's envd gateway in its shape, and over SSH; the CLI names the
// command that fixes it; a sandbox made with auto-resume is resumed by the
// call instead; and a restart logs the paused sandbox as designed, not as
// an error.
func TestPausedAndStoppedAnswerAtOnce(t *testing.T) {
	t.Parallel()
	requireTools(t, "ssh", "ssh-keygen")
	d, sshPort := sshDaemon(t)
	c := d.Client()
	ctx := ctxFor(t, 4*time.Minute)
	name := "pz-" + randomHex(4)
	sb, err := c.Create(ctx, client.CreateRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	auto, err := c.Create(ctx, client.CreateRequest{Lifecycle: &client.Lifecycle{OnTimeout: "pause", AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := newSandbox(t, ctx, c)
	if _, err := c.Pause(ctx, sb.ID, "memory"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, auto.ID, "memory"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stop(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	auth := map[string]string{"Authorization": "Bearer " + d.Token}
	wantCode := func(t *testing.T, what string, status int, body, code string) {
		t.Helper()
		var eb struct {
			Error struct{ Code, Message string }
		}
		if status != http.StatusConflict || json.Unmarshal([]byte(body), &eb) != nil || eb.Error.Code != code {
			t.Errorf("%s: %d %s, want 409 %s", what, status, body, code)
		}
	}

	for _, tc := range []struct {
		id, code string
	}{{sb.ID, "sandbox_paused"}, {stopped, "sandbox_stopped"}} {
		t.Run(tc.code, func(t *testing.T) {
			base := d.URL() + "/v1/sandboxes/" + tc.id
			t0 := time.Now()
			_, err := c.Exec(ctx, tc.id, client.ExecRequest{Cmd: "echo", Args: []string{"hi"}})
			if !client.IsCode(err, tc.code) || time.Since(t0) > atOnce {
				t.Errorf("exec: %v after %s, want %s at once", err, time.Since(t0), tc.code)
			}
			// The streaming exec the CLI uses (the agent protocol through
			// the daemon) carries the same typed error.
			t0 = time.Now()
			_, err = c.ExecIO(ctx, tc.id, client.ExecRequest{Cmd: "echo"}, client.ExecStreams{Stdout: io.Discard, Stderr: io.Discard})
			if !client.IsCode(err, tc.code) || time.Since(t0) > atOnce {
				t.Errorf("streaming exec: %v after %s, want %s at once", err, time.Since(t0), tc.code)
			}
			st, body := rawCall(t, ctx, "GET", base+"/files?path=/etc/hostname", auth, "")
			wantCode(t, "GET files", st, body, tc.code)
			st, body = rawCall(t, ctx, "PUT", base+"/files?path=/tmp/x", auth, "data")
			wantCode(t, "PUT files", st, body, tc.code)
			pty := map[string]string{"Authorization": "Bearer " + d.Token, "Connection": "Upgrade", "Upgrade": "websocket",
				"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
			st, body = rawCall(t, ctx, "GET", base+"/pty", pty, "")
			wantCode(t, "PTY", st, body, tc.code)
			// Daytona's toolbox, in Daytona's error shape.
			st, body = rawCall(t, ctx, "POST", d.URL()+"/daytona/toolbox/"+tc.id+"/process/execute", auth, `{"command":"echo hi"}`)
			var db struct {
				StatusCode int    `json:"statusCode"`
				Message    string `json:"message"`
			}
			if st != http.StatusConflict || json.Unmarshal([]byte(body), &db) != nil || db.StatusCode != http.StatusConflict ||
				!strings.Contains(db.Message, strings.TrimPrefix(tc.code, "sandbox_")) {
				t.Errorf("Daytona execute: %d %s, want 409 naming the state", st, body)
			}
			// E2B's envd gateway answers as E2B does for a sandbox that
			// does not run (502, which its SDK reports as such).
			st, body = rawCall(t, ctx, "POST", d.URL()+"/e2b/envd/process.Process/Start",
				map[string]string{"E2b-Sandbox-Id": tc.id, "Content-Type": "application/json"}, `{}`)
			if st != http.StatusBadGateway || !strings.Contains(body, "not running") {
				t.Errorf("E2B envd: %d %s, want 502 not running", st, body)
			}
		})
	}

	t.Run("ssh", func(t *testing.T) {
		dir := t.TempDir()
		key, pub := sshKeygen(t, dir, "owner")
		if _, err := c.AddSSHKey(ctx, "", pub); err != nil {
			t.Fatal(err)
		}
		s := sshClient{t: t, addr: "127.0.0.1", port: *sshPort, key: key, knownHosts: dir + "/known_hosts"}
		t0 := time.Now()
		_, errOut, code := s.run(ctx, nil, "ssh", name+"@127.0.0.1", "echo hi")
		// The handshake is a real SSH client's; the bound is generous for
		// it, and a hang would take minutes.
		if code != 255 || !strings.Contains(errOut, "paused") || time.Since(t0) > 10*time.Second {
			t.Errorf("ssh into a paused sandbox: exit %d %q after %s", code, errOut, time.Since(t0))
		}
	})

	t.Run("cli", func(t *testing.T) {
		_, errOut, code := runCLI(t, ctx, d, nil, "exec", name, "--", "echo", "hi")
		want := "sandbox " + name + " is paused: run 'sandpit resume " + name + "'"
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("sandpit exec on a paused sandbox: exit %d %q, want %q", code, errOut, want)
		}
	})

	t.Run("auto-resume", func(t *testing.T) {
		res, err := c.Exec(ctx, auto.ID, client.ExecRequest{Cmd: "echo", Args: []string{"awake"}})
		if err != nil || strings.TrimSpace(res.Stdout) != "awake" {
			t.Fatalf("exec on an auto-resume sandbox: %+v %v", res, err)
		}
		if got, err := c.Get(ctx, auto.ID); err != nil || got.State != "running" {
			t.Fatalf("after the exec: %+v %v", got, err)
		}
	})

	t.Run("restart", func(t *testing.T) {
		d.Stop()
		if !d.Wait(30 * time.Second) {
			t.Fatal("the daemon did not stop")
		}
		before := len(d.Logs())
		d.Restart(nil)
		c := d.Client()
		_, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo"})
		if !client.IsCode(err, "sandbox_paused") {
			t.Errorf("exec after the restart: %v, want sandbox_paused", err)
		}
		if _, err := c.Resume(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo", Args: []string{"back"}}); err != nil || strings.TrimSpace(res.Stdout) != "back" {
			t.Fatalf("exec after the resume: %+v %v", res, err)
		}
		for _, line := range strings.Split(d.Logs()[before:], "\n") {
			if strings.Contains(line, "level=ERROR") && strings.Contains(line, sb.ID) {
				t.Errorf("the restart logged the paused sandbox as an error: %s", line)
			}
		}
	})
}

// TestShutdownBoundedByDrainTimeout: a SIGTERM with a stream open (a
// command that would run for ten minutes) stops the daemon once the drain
// timeout has passed, and the log says what the shutdown waited for.
func TestShutdownBoundedByDrainTimeout(t *testing.T) {
	t.Parallel()
	const drain = 3 * time.Second
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--drain-timeout", drain.String()}})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	started := make(chan struct{})
	go func() {
		_, _ = c.ExecIO(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo up; sleep 600"}},
			client.ExecStreams{Stdout: writerFunc(func(b []byte) (int, error) {
				select {
				case <-started:
				default:
					close(started)
				}
				return len(b), nil
			}), Stderr: io.Discard})
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the command never started")
	}
	t0 := time.Now()
	d.Stop()
	// The rest of the shutdown (loops, router, store) takes well under a
	// second here; the bound is generous for a loaded machine, and far
	// below the 30 s a stream used to hold the shutdown.
	if !d.Wait(drain + 10*time.Second) {
		t.Fatalf("the daemon still runs %s after SIGTERM (drain timeout %s)", time.Since(t0), drain)
	}
	logs := d.Logs()
	for _, want := range []string{"shutdown: waiting for open requests", "/agent/process.Process/Start", "drain timeout passed"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the shutdown log does not say %q:\n%s", want, logs)
		}
	}
	t.Logf("stopped %s after SIGTERM with a stream open (drain timeout %s)", time.Since(t0).Round(time.Millisecond), drain)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
