package sandpit_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
	"github.com/sandpit-dev/sandpit/proto/filesystem/filesystemconnect"
	processpb "github.com/sandpit-dev/sandpit/proto/process"
	"github.com/sandpit-dev/sandpit/proto/process/processconnect"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// bearer adds the daemon's token to every request, for Connect clients that
// speak the agent protocol through /v1/sandboxes/{id}/agent.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func agentClients(d *harness.Daemon, id string) (processconnect.ProcessClient, filesystemconnect.FilesystemClient) {
	hc := &http.Client{Transport: bearer{token: d.Token, base: http.DefaultTransport}}
	base := d.URL() + "/v1/sandboxes/" + id + "/agent"
	return processconnect.NewProcessClient(hc, base, connect.WithProtoJSON()),
		filesystemconnect.NewFilesystemClient(hc, base, connect.WithProtoJSON())
}

// TestOCIRuntimes runs the agent's whole repertoire under runc and under
// gVisor's runsc (--oci-runtime runsc): exec with stdout, stderr and exit
// code, a PTY, signals, a file round trip, a directory watch and an HTTP
// server exposed through the proxy. runsc is skipped where Docker has no
// such runtime, except in CI, which registers it.
func TestOCIRuntimes(t *testing.T) {
	t.Parallel()
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			harness.RequireRuntime(t, rt)
			d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--oci-runtime", rt}})
			c := d.Client()
			ctx := ctxFor(t, 5*time.Minute)
			sb, err := c.Create(ctx, client.CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if h := dockerInspectHost(t, ctx, sb.ID); h.Runtime != rt {
				t.Fatalf("docker inspect: runtime %q, want %q", h.Runtime, rt)
			}
			proc, fs := agentClients(d, sb.ID)

			t.Run("exec", func(t *testing.T) {
				res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo out; echo err >&2; exit 3"}})
				if err != nil || res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 {
					t.Fatalf("exec: %+v %v", res, err)
				}
			})

			t.Run("pty", func(t *testing.T) {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				stream, err := proc.Start(sctx, connect.NewRequest(&processpb.StartRequest{
					Process: &processpb.ProcessConfig{Cmd: "sh", Args: []string{"-c", "stty size; tty; read line; echo got:$line"}},
					Pty:     &processpb.PTY{Size: &processpb.PTY_Size{Cols: 91, Rows: 27}},
				}))
				if err != nil {
					t.Fatal(err)
				}
				defer stream.Close()
				var out bytes.Buffer
				var pid uint32
				sent := false
				for stream.Receive() {
					ev := stream.Msg().GetEvent()
					if s := ev.GetStart(); s != nil {
						pid = s.GetPid()
					}
					out.Write(ev.GetData().GetPty())
					if !sent && strings.Contains(out.String(), "/dev/pts/") {
						sent = true
						_, err := proc.SendInput(sctx, connect.NewRequest(&processpb.SendInputRequest{
							Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}},
							Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte("hello\n")}},
						}))
						if err != nil {
							t.Fatalf("send input: %v", err)
						}
					}
					if end := ev.GetEnd(); end != nil {
						if end.GetExitCode() != 0 {
							t.Fatalf("pty process ended %d %q; output %q", end.GetExitCode(), end.GetStatus(), out.String())
						}
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatalf("pty stream: %v; output %q", err, out.String())
				}
				for _, want := range []string{"27 91", "/dev/pts/", "got:hello"} {
					if !strings.Contains(out.String(), want) {
						t.Fatalf("pty output %q lacks %q", out.String(), want)
					}
				}
			})

			t.Run("signal", func(t *testing.T) {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				stream, err := proc.Start(sctx, connect.NewRequest(&processpb.StartRequest{
					Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"600"}},
				}))
				if err != nil {
					t.Fatal(err)
				}
				defer stream.Close()
				if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
					t.Fatalf("no start event: %v", stream.Err())
				}
				pid := stream.Msg().GetEvent().GetStart().GetPid()
				if _, err := proc.SendSignal(sctx, connect.NewRequest(&processpb.SendSignalRequest{
					Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}},
					Signal:  processpb.Signal_SIGNAL_SIGTERM,
				})); err != nil {
					t.Fatal(err)
				}
				for stream.Receive() {
					if end := stream.Msg().GetEvent().GetEnd(); end != nil {
						if !strings.Contains(end.GetStatus(), "terminated") {
							t.Fatalf("end after SIGTERM: %q", end.GetStatus())
						}
						return
					}
				}
				t.Fatalf("the stream closed without an end event: %v", stream.Err())
			})

			t.Run("files", func(t *testing.T) {
				data := bytes.Repeat([]byte("sandpit\x00\xff"), 100_000)
				if err := c.WriteFile(ctx, sb.ID, "/tmp/rt/blob", data); err != nil {
					t.Fatal(err)
				}
				var got bytes.Buffer
				if err := c.ReadFile(ctx, sb.ID, "/tmp/rt/blob", &got); err != nil || !bytes.Equal(got.Bytes(), data) {
					t.Fatalf("round trip: %d bytes, %v", got.Len(), err)
				}
			})

			t.Run("watch", func(t *testing.T) {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				sh(t, ctx, c, sb.ID, "mkdir -p /tmp/watched")
				stream, err := fs.WatchDir(sctx, connect.NewRequest(&fspb.WatchDirRequest{Path: "/tmp/watched"}))
				if err != nil {
					t.Fatal(err)
				}
				defer stream.Close()
				if !stream.Receive() || stream.Msg().GetStart() == nil {
					t.Fatalf("no start event: %v", stream.Err())
				}
				sh(t, ctx, c, sb.ID, "echo x > /tmp/watched/new.txt")
				for stream.Receive() {
					if ev := stream.Msg().GetFilesystem(); ev != nil && ev.GetName() == "new.txt" && ev.GetType() == fspb.EventType_EVENT_TYPE_CREATE {
						return
					}
				}
				t.Fatalf("no create event for new.txt: %v", stream.Err())
			})

			t.Run("expose http", func(t *testing.T) {
				startHTTPD(t, ctx, c, sb.ID, 8080, "served under "+rt)
				p := mustExpose(t, ctx, d, sb.ID, 8080, "http", http.StatusCreated)
				testkit.Eventually(t, 15*time.Second, "the exposed server", func() error {
					return servesPage(ctx, d, p.PublicURL, "served under "+rt)
				})
			})

			// Last, since under runsc it ends the sandbox: gVisor accounts
			// the whole sandbox to the memory cgroup, so the OOM killer
			// takes the sandbox, not one process. Either way the allocation
			// fails promptly with an error, not a hang.
			t.Run("memory limit", func(t *testing.T) {
				res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "dd", Args: []string{"if=/dev/zero", "of=/dev/null", "bs=1100M", "count=1"}, TimeoutS: 150})
				if err == nil && res.ExitCode == 0 {
					t.Fatalf("a 1100 MiB allocation succeeded under the 1024 MiB default: %+v", res)
				}
				if rt != "runsc" {
					if err != nil {
						t.Fatalf("exec of the memory hog: %v", err)
					}
					return
				}
				t.Logf("memory hog under runsc: exit %d, error %v", res.ExitCode, err)
				testkit.Eventually(t, 30*time.Second, "the sandbox OOM-killed", func() error {
					out, err := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{.State.OOMKilled}}", "sandpit-"+sb.ID).Output()
					if err != nil || strings.TrimSpace(string(out)) != "true" {
						return fmt.Errorf("OOMKilled %q %v", out, err)
					}
					return nil
				})
			})
		})
	}
}
