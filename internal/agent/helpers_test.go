package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	fspb "github.com/sandpit-dev/sandpit/proto/filesystem"
	"github.com/sandpit-dev/sandpit/proto/filesystem/filesystemconnect"
	processpb "github.com/sandpit-dev/sandpit/proto/process"
	"github.com/sandpit-dev/sandpit/proto/process/processconnect"
)

const testToken = "test-token"

// tokenTransport adds the access token to every request, as the daemon's
// proxy and E2B SDKs do.
type tokenTransport struct {
	token string
	base  http.RoundTripper
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(agentapi.AccessTokenHeader, t.token)
	return t.base.RoundTrip(r)
}

// testEnv is an agent served by httptest with clients that use the JSON
// codec, as the E2B SDK does.
type testEnv struct {
	srv  *httptest.Server
	http *http.Client // sends the token
	proc processconnect.ProcessClient
	fs   filesystemconnect.FilesystemClient
}

func newTestEnv(t *testing.T, mutate ...func(*Config)) *testEnv {
	t.Helper()
	cfg := Config{
		Token:             testToken,
		Env:               map[string]string{"PATH": os.Getenv("PATH"), "HOME": t.TempDir()},
		Logger:            slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KeepaliveInterval: time.Minute,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	srv := httptest.NewServer(NewHandler(cfg))
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: tokenTransport{token: testToken, base: srv.Client().Transport}}
	return &testEnv{
		srv:  srv,
		http: hc,
		proc: processconnect.NewProcessClient(hc, srv.URL, connect.WithProtoJSON()),
		fs:   filesystemconnect.NewFilesystemClient(hc, srv.URL, connect.WithProtoJSON()),
	}
}

// testWriter sends agent logs to the test log, so they show up only when a
// test fails.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// shell builds a StartRequest running script with /bin/sh.
func shell(script string) *processpb.StartRequest {
	return &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}}
}

// result is what a process stream delivered.
type result struct {
	events []*processpb.ProcessEvent
	pid    uint32
	stdout string
	stderr string
	pty    string
	end    *processpb.ProcessEvent_EndEvent
	keeps  int
	err    error
}

// drain reads a Start stream to its end.
func drain(s *connect.ServerStreamForClient[processpb.StartResponse]) result {
	return drainEvents(s.Receive, func() *processpb.ProcessEvent { return s.Msg().GetEvent() }, s.Err)
}

// drainConnect reads a Connect stream to its end.
func drainConnect(s *connect.ServerStreamForClient[processpb.ConnectResponse]) result {
	return drainEvents(s.Receive, func() *processpb.ProcessEvent { return s.Msg().GetEvent() }, s.Err)
}

func drainEvents(receive func() bool, msg func() *processpb.ProcessEvent, errf func() error) result {
	var r result
	for receive() {
		r.add(msg())
	}
	r.err = errf()
	return r
}

func (r *result) add(ev *processpb.ProcessEvent) {
	r.events = append(r.events, ev)
	switch e := ev.GetEvent().(type) {
	case *processpb.ProcessEvent_Start:
		r.pid = e.Start.GetPid()
	case *processpb.ProcessEvent_Data:
		r.stdout += string(e.Data.GetStdout())
		r.stderr += string(e.Data.GetStderr())
		r.pty += string(e.Data.GetPty())
	case *processpb.ProcessEvent_End:
		r.end = e.End
	case *processpb.ProcessEvent_Keepalive:
		r.keeps++
	}
}

// run starts a process and waits for its stream to end.
func (e *testEnv) run(t *testing.T, req *processpb.StartRequest) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stream, err := e.proc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() { _ = stream.Close() }()
	return drain(stream)
}

// wantExit checks a finished stream: start first, end last, given exit code.
func wantExit(t *testing.T, r result, code int32) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("stream error: %v", r.err)
	}
	if len(r.events) == 0 || r.events[0].GetStart() == nil {
		t.Fatalf("first event is not start: %v", r.events)
	}
	if r.end == nil || r.events[len(r.events)-1].GetEnd() == nil {
		t.Fatalf("last event is not end: %v", r.events)
	}
	if r.end.GetExitCode() != code || !r.end.GetExited() {
		t.Fatalf("end = %v, want exit code %d", r.end, code)
	}
}

// startBackground starts a process and returns its stream after the start
// event, with the pid.
func (e *testEnv) startBackground(t *testing.T, ctx context.Context, req *processpb.StartRequest) (*connect.ServerStreamForClient[processpb.StartResponse], uint32) {
	t.Helper()
	stream, err := e.proc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !stream.Receive() {
		t.Fatalf("no start event: %v", stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	if pid == 0 {
		t.Fatalf("first event is not start: %v", stream.Msg())
	}
	return stream, pid
}

// listed reports whether pid is among the running processes.
func (e *testEnv) listed(t *testing.T, pid uint32) bool {
	t.Helper()
	res, err := e.proc.List(t.Context(), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return slices.ContainsFunc(res.Msg.GetProcesses(), func(p *processpb.ProcessInfo) bool { return p.GetPid() == pid })
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("got %v (%v), want %v", got, err, code)
	}
}

func kill(t *testing.T, e *testEnv, pid uint32) {
	t.Helper()
	_, err := e.proc.SendSignal(t.Context(), connect.NewRequest(&processpb.SendSignalRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}},
		Signal:  processpb.Signal_SIGNAL_SIGKILL,
	}))
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("SendSignal: %v", err)
	}
}

func pidSel(pid uint32) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
}

func entryPaths(entries []*fspb.EntryInfo) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.GetPath())
	}
	return out
}
