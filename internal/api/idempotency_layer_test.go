package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// keyedSurface is a surface with one keyed create and one unkeyed route,
// over the real engine and a real store, rendering errors in a shape of its
// own so that the test sees the layer use the surface's renderer.
type keyedSurface struct {
	srv     *httptest.Server
	release chan struct{}
	// entered has a value for each time the create handler starts.
	entered chan struct{}
	mu      sync.Mutex
	made    []string // the ids the create handler made
}

func newKeyedSurface(t *testing.T, wait time.Duration) *keyedSurface {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	layer := api.NewIdempotency(idempotency.New(st, time.Now, log, nil), api.IdempotencyConfig{Wait: wait, Logger: log})
	render := func(w http.ResponseWriter, _ *http.Request, err error) {
		p := api.Classify(err)
		api.WriteJSON(w, p.Status, map[string]any{"surfaceError": p.Code, "status": p.Status})
	}
	s := &keyedSurface{release: make(chan struct{}), entered: make(chan struct{}, 64)}
	mux := http.NewServeMux()
	routes := api.NewRoutes(mux, render, nil).Keyed(layer.For("test", api.KeyPrintable, render))
	routes.HandleKeyed("POST /things", sandpit.ActionManage, api.Keying{Mode: api.KeyedCreate, Prefix: "th-"}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		<-s.release
		id := api.TargetID(r.Context())
		if id == "" {
			id = "unkeyed"
		}
		s.mu.Lock()
		s.made = append(s.made, id)
		s.mu.Unlock()
		api.WriteJSON(w, http.StatusCreated, map[string]string{"id": id})
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

type keyedAnswer struct {
	status   int
	replayed bool
	id, code string
}

func (s *keyedSurface) post(t *testing.T, body, key string) keyedAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/things", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return keyedAnswer{}
	}
	defer resp.Body.Close()
	var v struct {
		ID           string `json:"id"`
		SurfaceError string `json:"surfaceError"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return keyedAnswer{resp.StatusCode, resp.Header.Get(api.ReplayedHeader) == "true", v.ID, v.SurfaceError}
}

// TestKeyedLayer: the one layer every wire runs its keyed routes through.
// A duplicate of a request in flight waits, then is 409 in the surface's
// shape; once the first completes, the key replays its answer marked
// Idempotent-Replayed; the same key with another body is 422; a KeyedCreate
// handler is told an id chosen before it ran, the same for every retry; a
// malformed key is 400 and runs nothing.
func TestKeyedLayer(t *testing.T) {
	s := newKeyedSurface(t, 200*time.Millisecond)
	first := make(chan keyedAnswer, 1)
	go func() { first <- s.post(t, `{"a":1}`, "k1") }()
	// Only once the first holds the key (its handler runs, waiting for
	// release) is a duplicate sent: one sent before would hold the key
	// itself, and wait for a release that never comes.
	select {
	case <-s.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first request never reached its handler")
	}
	// A duplicate waits its 200 ms and is refused as in flight, in the
	// surface's shape.
	var dup keyedAnswer
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		if dup = s.post(t, `{"a":1}`, "k1"); dup.status == http.StatusConflict {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if dup.status != http.StatusConflict || dup.code != "idempotency_key_in_flight" {
		t.Fatalf("duplicate in flight: %+v, want 409 idempotency_key_in_flight", dup)
	}
	close(s.release)
	a := <-first
	if a.status != http.StatusCreated || a.replayed || !strings.HasPrefix(a.id, "th-") {
		t.Fatalf("first: %+v, want 201 with a th- id chosen by the layer", a)
	}
	again := s.post(t, ` { "a" : 1 } `, "k1")
	if again.status != http.StatusCreated || !again.replayed || again.id != a.id {
		t.Fatalf("retry: %+v, want the replay of %s", again, a.id)
	}
	if other := s.post(t, `{"a":2}`, "k1"); other.status != http.StatusUnprocessableEntity || other.code != "idempotency_key_mismatch" {
		t.Fatalf("reused key, other body: %+v, want 422", other)
	}
	if bad := s.post(t, `{"a":1}`, "tab\there"); bad.status != http.StatusBadRequest || bad.code != "invalid_idempotency_key" {
		t.Fatalf("malformed key: %+v, want 400", bad)
	}
	two := s.post(t, `{"a":1}`, "k2")
	if two.status != http.StatusCreated || two.replayed || two.id == a.id {
		t.Fatalf("another key: %+v, want a second resource", two)
	}
	if unkeyed := s.post(t, `{"a":1}`, ""); unkeyed.id != "unkeyed" || unkeyed.replayed {
		t.Fatalf("without a key: %+v, want the handler run as is", unkeyed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.made) != 3 {
		t.Fatalf("the handler ran %d times (%v), want 3: k1 once, k2 once, the unkeyed request", len(s.made), s.made)
	}
}
