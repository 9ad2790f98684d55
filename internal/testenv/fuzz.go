package testenv

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// ErrEngineDown is what EngineDown answers to every call.
var ErrEngineDown = errors.New("engine unavailable (test stand-in)")

// EngineDown is a container engine that is not there: every call fails. Fuzz
// targets run thousands of requests a second through the real handlers, the
// real service and a real store, where a real engine cannot keep up; an
// engine that refuses everything is a state the real one can be in, and
// whatever reaches it has passed all input validation.
type EngineDown struct{}

var _ driver.Driver = EngineDown{}

func (EngineDown) Create(context.Context, driver.Spec) (string, error) { return "", ErrEngineDown }
func (EngineDown) Start(context.Context, string) error                 { return ErrEngineDown }
func (EngineDown) Stop(context.Context, string, time.Duration) error   { return ErrEngineDown }
func (EngineDown) Remove(context.Context, string) error                { return ErrEngineDown }
func (EngineDown) Inspect(context.Context, string) (driver.Container, error) {
	return driver.Container{}, ErrEngineDown
}
func (EngineDown) Output(context.Context, string, int) (string, error) {
	return "", ErrEngineDown
}
func (EngineDown) List(context.Context, map[string]string) ([]driver.Container, error) {
	return nil, ErrEngineDown
}
func (EngineDown) Pause(context.Context, string) error                  { return ErrEngineDown }
func (EngineDown) Unpause(context.Context, string) error                { return ErrEngineDown }
func (EngineDown) Update(context.Context, string, float64, int64) error { return ErrEngineDown }
func (EngineDown) Stats(context.Context, string) (driver.Stats, error) {
	return driver.Stats{}, ErrEngineDown
}
func (EngineDown) DiskUsage(context.Context, string) (int64, error) { return 0, ErrEngineDown }
func (EngineDown) Events(ctx context.Context, _ map[string]string) (<-chan driver.Event, <-chan error) {
	errs := make(chan error, 1)
	errs <- ErrEngineDown
	return make(chan driver.Event), errs
}

// FuzzService is a real service over a real store in a temporary directory
// and an engine that is down, for fuzzing the HTTP surfaces.
func FuzzService(t testing.TB) (*service.Service, *store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := service.New(service.Config{DefaultImage: "sandpit/base:test", AgentBinary: "/bin/true", HealthTimeout: time.Second}, st, EngineDown{}, nil)
	return svc, st
}

// ServeNo500 sends one request through h and fails the test when the answer
// is a 500: input the client controls must be refused with a 4xx, and the
// only 5xx a request may earn is the engine's (502-504).
func ServeNo500(t *testing.T, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code == http.StatusInternalServerError {
		t.Fatalf("%s %s -> 500: %s", req.Method, req.URL, rec.Body.String())
	}
	return rec
}
