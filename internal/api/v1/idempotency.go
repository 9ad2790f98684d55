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

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
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
	Now        func() time.Time
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
	"POST /v1/sandboxes/{id}/ports":                       true,
	"DELETE /v1/sandboxes/{id}/ports/{port}":              true,
	"POST /v1/sandboxes/{id}/custom-domains":              true,
	"DELETE /v1/sandboxes/{id}/custom-domains/{hostname}": true,
}

// Idempotency implements the Idempotency-Key header on top of the store's
// request_idempotency claim: the key is the fingerprint, the scope is the
// caller and the route, and the row keeps a hash of the request and the
// final response.
type Idempotency struct {
	st     *store.Store
	cfg    IdempotencyConfig
	caller string
}

// NewIdempotency builds the layer; token identifies the caller (only its hash
// is stored).
func NewIdempotency(st *store.Store, token string, cfg IdempotencyConfig) *Idempotency {
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Second
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 24 * time.Hour
	}
	if cfg.PendingTTL <= 0 {
		cfg.PendingTTL = 2 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	sum := sha256.Sum256([]byte(token))
	return &Idempotency{st: st, cfg: cfg, caller: hex.EncodeToString(sum[:8])}
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
			writeError(w, api.Problem{Status: http.StatusBadRequest, Code: api.CodeInvalidKey,
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

func (m *Idempotency) serve(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, pattern, key string) {
	ctx := r.Context()
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, api.MaxBodyBytes))
	if err != nil {
		fail(w, fmt.Errorf("%w: limit is %d bytes", api.ErrBodyTooLarge, api.MaxBodyBytes))
		return
	}
	scope := "v1:" + m.caller + ":" + pattern
	hash := requestHash(r.Method, r.URL.Path, body)
	deadline := time.Now().Add(m.cfg.Wait)
	for {
		claim, err := m.st.ClaimIdempotentRequest(ctx, sandpit.ClaimRequest{Scope: scope, Fingerprint: key, RequestHash: hash, PendingTTL: m.cfg.PendingTTL}, m.cfg.Now().UTC())
		if err != nil {
			fail(w, err)
			return
		}
		switch claim.Outcome {
		case sandpit.Mismatch:
			writeError(w, api.Problem{Status: http.StatusUnprocessableEntity, Code: api.CodeKeyMismatch,
				Message: "this Idempotency-Key was already used for a different request"})
			return
		case sandpit.Replay:
			replay(w, claim)
			return
		case sandpit.Acquired:
			m.execute(w, r, h, pattern, body, claim)
			return
		case sandpit.InFlight:
			done, ok := m.await(ctx, scope, key, deadline)
			if ok {
				replay(w, done)
				return
			}
			if ctx.Err() != nil {
				return
			}
			if time.Now().After(deadline) {
				writeError(w, api.Problem{Status: http.StatusConflict, Code: api.CodeKeyInFlight,
					Message: "a request with this Idempotency-Key is still in progress; retry later"})
				return
			}
			// The first attempt failed and released the key: claim again.
		}
	}
}

// await polls the claim until it completes (ok), disappears (the first
// attempt failed: !ok, claim again) or the deadline passes.
func (m *Idempotency) await(ctx context.Context, scope, key string, deadline time.Time) (sandpit.Claim, bool) {
	delay := 10 * time.Millisecond
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return sandpit.Claim{}, false
		case <-time.After(delay):
		}
		if delay < 250*time.Millisecond {
			delay *= 2
		}
		c, err := m.st.GetIdempotentRequest(ctx, scope, key)
		if errors.Is(err, sandpit.ErrNotFound) {
			return sandpit.Claim{}, false
		}
		if err == nil && c.State == "ready" {
			return c, true
		}
	}
	return sandpit.Claim{}, false
}

func replay(w http.ResponseWriter, c sandpit.Claim) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(c.ResponseStatus)
	_, _ = w.Write(c.ResponseBody)
}

// execute runs the handler under an acquired claim and records its response.
// For a create the sandbox id is chosen and recorded in the claim before any
// side effect; a retry after a crash finds it there and either adopts the
// sandbox the crashed attempt finished or creates it under the same id, so
// it never makes a second one.
func (m *Idempotency) execute(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, pattern string, body []byte, claim sandpit.Claim) {
	ctx := r.Context()
	scope, key := claim.Scope, claim.Fingerprint
	release := func() {
		if err := m.st.DeleteIdempotentRequest(context.WithoutCancel(ctx), scope, key); err != nil {
			m.cfg.Logger.Error("release idempotency claim", "scope", scope, "err", err)
		}
	}
	if pattern == "POST /v1/sandboxes" {
		id := claim.TargetID
		if id == "" {
			id = service.NewSandboxID()
			if err := m.st.SetIdempotentTarget(ctx, scope, key, claim.Generation, id, m.cfg.Now().UTC()); err != nil {
				release()
				fail(w, err)
				return
			}
		}
		r = r.WithContext(WithID(ctx, id))
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	h(rec, r)

	// Server-side failures and a full quota (429) are not recorded: the
	// request may well succeed when retried, and every failing path has
	// already undone its effects.
	if rec.status >= 500 || rec.status == http.StatusTooManyRequests {
		release()
	} else {
		err := m.st.CompleteIdempotentRequest(context.WithoutCancel(ctx), sandpit.Completion{
			Scope: scope, Fingerprint: key, Generation: claim.Generation, TargetID: rec.target(claim.TargetID),
			ResponseStatus: rec.status, ResponseBody: rec.body.Bytes(), ReplayTTL: m.cfg.Retention,
		}, m.cfg.Now().UTC())
		if err != nil {
			m.cfg.Logger.Error("complete idempotency claim", "scope", scope, "err", err)
		}
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
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
