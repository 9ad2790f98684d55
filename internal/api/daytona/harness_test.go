package daytona

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/agent"
	"github.com/sandpit-dev/sandpit/internal/runtime"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// These tests need no Docker: a fake runtime stands in for the engine, and
// the real agent handler runs in-process, on the host, at an address of its
// own on the loopback network (127.x.y.z:49983, the port the service
// expects). Every fake sandbox points at that one agent.

const testToken = "test-token"

// fakeRuntime is an in-memory runtime.Runtime whose containers all live at
// one address.
type fakeRuntime struct {
	ip string
	mu sync.Mutex
	cs map[string]runtime.Container
}

func (f *fakeRuntime) Create(_ context.Context, spec runtime.Spec) (string, error) {
	if spec.Image == "missing:image" {
		return "", runtime.ErrImageNotFound
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := "sandpit-" + spec.SandboxID
	f.cs[id] = runtime.Container{ID: id, SandboxID: spec.SandboxID, Name: id, Image: spec.Image, State: "created", IP: f.ip, Labels: spec.Labels}
	return id, nil
}

func (f *fakeRuntime) set(id, state string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cs[id]
	if !ok {
		return runtime.ErrNotFound
	}
	c.State = state
	f.cs[id] = c
	return nil
}

func (f *fakeRuntime) Start(_ context.Context, id string) error { return f.set(id, "running") }
func (f *fakeRuntime) Stop(_ context.Context, id string, _ time.Duration) error {
	return f.set(id, "exited")
}
func (f *fakeRuntime) Pause(_ context.Context, id string) error   { return f.set(id, "paused") }
func (f *fakeRuntime) Unpause(_ context.Context, id string) error { return f.set(id, "running") }

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.cs, id)
	return nil
}

func (f *fakeRuntime) Inspect(_ context.Context, id string) (runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cs[id]
	if !ok {
		return c, runtime.ErrNotFound
	}
	return c, nil
}

func (f *fakeRuntime) List(_ context.Context, _ map[string]string) ([]runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]runtime.Container, 0, len(f.cs))
	for _, c := range f.cs {
		out = append(out, c)
	}
	return out, nil
}

func (f *fakeRuntime) Stats(context.Context, string) (runtime.Stats, error) {
	return runtime.Stats{}, nil
}

func (f *fakeRuntime) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cs)
}

// startAgent serves the real agent handler on a random 127.x.y.z at the
// agent port, and returns that address's IP.
func startAgent(t *testing.T) string {
	t.Helper()
	for range 20 {
		var b [3]byte
		_, _ = rand.Read(b[:])
		ip := fmt.Sprintf("127.%d.%d.%d", b[0]%250+1, b[1], b[2]%250+2)
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(runtime.AgentPort)))
		if err != nil {
			continue
		}
		srv := &http.Server{Handler: agent.NewHandler(agent.Config{Logger: slog.New(slog.DiscardHandler)})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ip
	}
	t.Fatal("cannot bind an address on the loopback network")
	return ""
}

// env is a facade under test.
type env struct {
	t   *testing.T
	srv *httptest.Server
	h   *Handler
	rt  *fakeRuntime
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt := &fakeRuntime{ip: startAgent(t), cs: map[string]runtime.Container{}}
	log := slog.New(slog.DiscardHandler)
	svc := service.New(service.Config{
		DefaultImage:  "sandpit/base:test",
		Templates:     map[string]string{"base": "sandpit/base:test"},
		HealthTimeout: 5 * time.Second,
		ProxyPort:     7480,
		Logger:        log,
	}, st, rt, nil)
	h := New(ctx, svc, testToken, Options{Logger: log})
	mux := http.NewServeMux()
	mux.Handle(DefaultPrefix+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, h: h, rt: rt}
}

// do sends a request with the token and returns the status and body.
func (e *env) do(method, path string, body any) (int, []byte) {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = strings.NewReader(string(j))
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// decode unmarshals b into a new T.
func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// create makes a sandbox through the facade and returns it.
func (e *env) create(body any) Sandbox {
	e.t.Helper()
	code, b := e.do("POST", "/daytona/sandbox", body)
	if code != http.StatusOK {
		e.t.Fatalf("create: %d %s", code, b)
	}
	return decode[Sandbox](e.t, b)
}
