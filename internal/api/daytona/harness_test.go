package daytona

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// These tests run the facade in-process over the real service: a real store
// in t.TempDir(), the real Docker runtime, and the sandpit binary built from
// this checkout as every sandbox's agent. Each env labels its containers
// with a run label of its own and removes them when the test ends.

const testToken = "test-token"

// agentBinary is built once for the package by TestMain.
var agentBinary string

func TestMain(m *testing.M) { os.Exit(harness.RunWithBinary(m, &agentBinary)) }

// containers counts an env's containers in the engine.
type containers struct {
	rt     driver.Driver
	labels map[string]string
}

func (c containers) count(t *testing.T) int {
	t.Helper()
	list, err := c.rt.List(context.Background(), c.labels)
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// env is a facade under test.
type env struct {
	t   *testing.T
	srv *httptest.Server
	h   *Handler
	// svc is the service under h, for what a test sets up around it.
	svc *service.Service
	rt  containers
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
	image := testenv.TestImage(t)
	labels := testenv.RunLabel(t)
	rt, err := docker.New(ctx, docker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	svc := service.New(service.Config{
		DefaultImage:  image,
		Templates:     map[string]string{"base": image},
		AgentBinary:   agentBinary,
		HealthTimeout: 30 * time.Second,
		ProxyPort:     7480,
		ExtraLabels:   labels,
		Logger:        log,
	}, st, rt, nil)
	tpl := templates.New(templates.Config{DaemonTemplates: map[string]string{"base": image}, Logger: log}, st, svc.Idempotency(), svc.Events(), svc)
	svc.UseTemplates(tpl)
	h := New(ctx, svc, api.NewAuth(svc.Identity(), testToken), Options{Logger: log, Templates: tpl})
	mux := http.NewServeMux()
	mux.Handle(DefaultPrefix+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, h: h, svc: svc, rt: containers{rt: rt, labels: labels}}
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
