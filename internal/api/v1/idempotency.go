package v1

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// IdempotencyConfig tunes the Idempotency-Key layer.
type IdempotencyConfig struct {
	// Wait bounds how long a duplicate waits for the first attempt.
	Wait time.Duration
	// Retention is how long a completed response is replayed.
	Retention time.Duration
	// PendingTTL is how long an attempt holds its key before it is presumed
	// dead. At daemon start every pending claim is expired at once, since no
	// attempt outlives the process that ran it.
	PendingTTL time.Duration
	Logger     *slog.Logger
}

// keyedPatterns are the routes that honour Idempotency-Key. Exec is left out
// on purpose: replaying a command's output instead of running it is rarely
// what a caller means. File writes and the agent proxy stream, so they are
// idempotent by nature or not replayable.
var keyedPatterns = map[string]bool{
	"POST /v1/sandboxes":                                  true,
	"DELETE /v1/sandboxes/{id}":                           true,
	"POST /v1/sandboxes/{id}/start":                       true,
	"POST /v1/sandboxes/{id}/stop":                        true,
	"POST /v1/sandboxes/{id}/pause":                       true,
	"POST /v1/sandboxes/{id}/resume":                      true,
	"POST /v1/sandboxes/{id}/ports":                       true,
	"DELETE /v1/sandboxes/{id}/ports/{port}":              true,
	"POST /v1/sandboxes/{id}/custom-domains":              true,
	"DELETE /v1/sandboxes/{id}/custom-domains/{hostname}": true,
	"POST /v1/templates":                                  true,
	"DELETE /v1/templates/{name}":                         true,
	"POST /v1/sandboxes/{id}/snapshots":                   true,
	"POST /v1/sandboxes/{id}/fork":                        true,
	"DELETE /v1/snapshots/{name}":                         true,
	"POST /v1/volumes":                                    true,
	"DELETE /v1/volumes/{name}":                           true,
	"POST /v1/ssh-keys":                                   true,
	"DELETE /v1/ssh-keys/{key}":                           true,
	"POST /v1/sandboxes/{id}/ssh-access":                  true,
	"DELETE /v1/sandboxes/{id}/ssh-access":                true,
}

// targetPrefix lists the keyed routes that make a resource whose id is
// chosen and recorded in the claim before anything is made (with the id's
// prefix), so the retry of a crashed attempt makes it under the same id.
var targetPrefix = map[string]string{
	"POST /v1/sandboxes": "",
	"POST /v1/templates": service.TemplateIDPrefix,
	// A snapshot is made under the recorded id; a fork's copies and its
	// base snapshot are derived from it.
	"POST /v1/sandboxes/{id}/snapshots": service.TemplateIDPrefix,
	"POST /v1/sandboxes/{id}/fork":      "",
}

// Idempotency implements the Idempotency-Key header on the service's
// idempotency engine: the key is the fingerprint, the scope is the caller and
// the route, and the claim keeps a hash of the request and the final
// response.
type Idempotency struct {
	engine *idempotency.Engine
	cfg    IdempotencyConfig
}

// NewIdempotency builds the layer. Keys are scoped by the owner of the
// request's token (service.OwnerScope), so two owners never share a key.
func NewIdempotency(engine *idempotency.Engine, cfg IdempotencyConfig) *Idempotency {
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Second
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 24 * time.Hour
	}
	if cfg.PendingTTL <= 0 {
		cfg.PendingTTL = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Idempotency{engine: engine, cfg: cfg}
}

// Wrap is the route wrapper New takes.
func (m *Idempotency) Wrap(pattern string, h http.HandlerFunc) http.Handler {
	if !keyedPatterns[pattern] {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, present := r.Header["Idempotency-Key"]
		if !present {
			h(w, r)
			return
		}
		if len(key) != 1 || !validKey(key[0]) {
			fail(w, api.Problem{Status: http.StatusBadRequest, Code: apitypes.CodeInvalidKey,
				Message: "Idempotency-Key must be one header of 1-255 printable ASCII characters"})
			return
		}
		m.serve(w, r, h, pattern, key[0])
	})
}

func validKey(k string) bool {
	if len(k) < 1 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// requestHash hashes the method, the path and the canonical body, so the
// same key reused for a different request is detected. JSON bodies are
// canonicalised (keys sorted, whitespace dropped) so a client re-encoding the
// same object is still the same request.
func requestHash(method, path string, body []byte) string {
	canon := bytes.TrimSpace(body)
	var v any
	if len(canon) > 0 && json.Unmarshal(canon, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canon = b
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", method, path)
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil))
}

// serve runs the handler through the engine. For a create the sandbox id is
// chosen and recorded in the claim before any side effect; a retry after a
// crash finds it there and the create handler adopts the sandbox the crashed
// attempt made or makes it under the same id (service.CreateOrAdopt), so it
// never makes a second one.
func (m *Idempotency) serve(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, pattern, key string) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, api.MaxBodyBytes))
	if err != nil {
		fail(w, fmt.Errorf("%w: limit is %d bytes", api.ErrBodyTooLarge, api.MaxBodyBytes))
		return
	}
	var header http.Header
	req := idempotency.Request{
		Scope: service.OwnerScope(r.Context(), "v1:"+pattern), Key: key, RequestHash: requestHash(r.Method, r.URL.Path, body),
		PendingTTL: m.cfg.PendingTTL, Wait: m.cfg.Wait, ReplayTTL: m.cfg.Retention,
	}
	resp, outcome, err := m.engine.Do(r.Context(), req, func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
		if prefix, ok := targetPrefix[pattern]; ok {
			if !a.Resumed() {
				if err := a.SetTarget(ctx, prefix+service.NewSandboxID()); err != nil {
					return idempotency.Response{}, err
				}
			}
			ctx = WithID(ctx, a.TargetID)
		}
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		r2 := r.WithContext(ctx)
		r2.Body = io.NopCloser(bytes.NewReader(body))
		h(rec, r2)
		header = rec.header
		return idempotency.Response{Status: rec.status, Body: rec.body.Bytes(), TargetID: rec.target(a.TargetID)}, nil
	})
	switch {
	case errors.Is(err, idempotency.ErrKeyMismatch):
		fail(w, api.Problem{Status: http.StatusUnprocessableEntity, Code: apitypes.CodeKeyMismatch,
			Message: "this Idempotency-Key was already used for a different request"})
		return
	case errors.Is(err, idempotency.ErrKeyInFlight):
		fail(w, api.Problem{Status: http.StatusConflict, Code: apitypes.CodeKeyInFlight,
			Message: "a request with this Idempotency-Key is still in progress; retry later"})
		return
	case err != nil:
		if r.Context().Err() == nil {
			fail(w, err)
		}
		return
	}
	if outcome == idempotency.Replayed {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
	}
	for k, v := range header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// recorder buffers a handler's response so it can be stored before it is
// sent: a client that sees a response can rely on its replay.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}

// target extracts the resource id of a JSON response, falling back to the
// claim's.
func (r *recorder) target(fallback string) string {
	var v struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(r.body.Bytes(), &v) == nil && v.ID != "" {
		return v.ID
	}
	if fallback != "" {
		return fallback
	}
	return "-"
}
