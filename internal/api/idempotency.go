package api

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

	"github.com/sandpit-dev/sandpit/internal/api/route"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// The Idempotency-Key contract of every wire. A route declares whether it
// honours the header (Routes.HandleKeyed); the surface gives the engine it
// runs on, the key syntax its wire uses and its error renderer
// (Idempotency.For). The contract is one: a completed answer is stored and
// replayed with Idempotent-Replayed: true, a key reused for another request
// is refused, and a duplicate of a request in flight waits for it, then is
// refused as in flight. See docs/idempotency.md.

// ReplayedHeader marks an answer that was not produced by this request but
// replayed from an earlier one (a keyed retry, or a create merged with an
// identical one by its fingerprint).
const ReplayedHeader = "Idempotent-Replayed"

// MarkReplayed says on w that its answer is a replay.
func MarkReplayed(w http.ResponseWriter) { w.Header().Set(ReplayedHeader, "true") }

// KeyMode and Keying, a route's Idempotency-Key declaration, are part of
// the route declarations (package route).
type (
	KeyMode = route.KeyMode
	Keying  = route.Keying
)

const (
	NotKeyed       = route.NotKeyed
	Keyed          = route.Keyed
	KeyedCreate    = route.KeyedCreate
	KeyedByHandler = route.KeyedByHandler
)

// KeyFormat is the Idempotency-Key syntax a wire accepts.
type KeyFormat int

const (
	// KeyPrintable: 1-255 printable ASCII characters (0x20-0x7E), the
	// native API's and Daytona's syntax.
	KeyPrintable KeyFormat = iota
	// KeyE2B: 1-255 lowercase ASCII letters, digits or hyphens, the syntax
	// E2B's SDK documents for its idempotencyKey option.
	KeyE2B
)

// Valid reports whether k is a key of the format.
func (f KeyFormat) Valid(k string) bool {
	if len(k) < 1 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch f {
		case KeyE2B:
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return false
			}
		default:
			if c < 0x20 || c > 0x7e {
				return false
			}
		}
	}
	return true
}

func (f KeyFormat) describe() string {
	if f == KeyE2B {
		return "1-255 lowercase ASCII letters, digits or hyphens"
	}
	return "1-255 printable ASCII characters"
}

// ErrInvalidKey is a malformed Idempotency-Key (Classify: 400
// invalid_idempotency_key).
var ErrInvalidKey = errors.New("invalid Idempotency-Key")

// IdempotencyKey returns the request's Idempotency-Key and whether it sent
// one. A key of the wrong syntax, or two headers, is ErrInvalidKey: the
// request must then be refused before it does anything.
func IdempotencyKey(r *http.Request, f KeyFormat) (string, bool, error) {
	keys, present := r.Header["Idempotency-Key"]
	if !present {
		return "", false, nil
	}
	if len(keys) != 1 || !f.Valid(keys[0]) {
		return "", true, fmt.Errorf("%w: it must be one header of %s", ErrInvalidKey, f.describe())
	}
	return keys[0], true, nil
}

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

// Idempotency is the Idempotency-Key layer over the idempotency engine, one
// for the whole daemon; each wire binds it with For.
type Idempotency struct {
	engine *idempotency.Engine
	cfg    IdempotencyConfig
}

// NewIdempotency builds the layer over engine.
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

// KeyWrapper wraps the handler of a keyed route (Routes.Keyed).
type KeyWrapper func(rt Route, h http.HandlerFunc) http.HandlerFunc

// For binds the layer to one wire: surface names its claims' scopes (keys
// are scoped by surface, route and the caller's owner), format is its key
// syntax and render its error renderer. A nil layer keys nothing.
func (m *Idempotency) For(surface string, format KeyFormat, render func(http.ResponseWriter, *http.Request, error)) KeyWrapper {
	return func(rt Route, h http.HandlerFunc) http.HandlerFunc {
		if m == nil || rt.Keying.Mode == NotKeyed || rt.Keying.Mode == KeyedByHandler {
			return h
		}
		return func(w http.ResponseWriter, r *http.Request) {
			key, present, err := IdempotencyKey(r, format)
			switch {
			case err != nil:
				render(w, r, err)
			case !present:
				h(w, r)
			default:
				m.serve(w, r, h, surface, rt, key, render)
			}
		}
	}
}

// RequestHash hashes the method, the path and the canonical body, so the
// same key reused for a different request is detected. JSON bodies are
// canonicalised (keys sorted, whitespace dropped) so a client re-encoding the
// same object is still the same request.
func RequestHash(method, path string, body []byte) string {
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

// serve runs the handler through the engine. For a KeyedCreate the
// resource id is chosen and recorded in the claim before any side effect; a
// retry after a crash finds it there, and the handler adopts what the
// crashed attempt made or makes it under the same id, never a second one.
func (m *Idempotency) serve(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, surface string, rt Route, key string, render func(http.ResponseWriter, *http.Request, error)) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	if err != nil {
		render(w, r, fmt.Errorf("%w: limit is %d bytes", ErrBodyTooLarge, MaxBodyBytes))
		return
	}
	var header http.Header
	req := idempotency.Request{
		Scope: identity.OwnerScope(r.Context(), surface+":"+rt.Pattern), Key: key, RequestHash: RequestHash(r.Method, r.URL.Path, body),
		PendingTTL: m.cfg.PendingTTL, Wait: m.cfg.Wait, ReplayTTL: m.cfg.Retention,
	}
	resp, outcome, err := m.engine.Do(r.Context(), req, func(ctx context.Context, a *idempotency.Attempt) (idempotency.Response, error) {
		if rt.Keying.Mode == KeyedCreate {
			if !a.Resumed() {
				if err := a.SetTarget(ctx, rt.Keying.Prefix+service.NewSandboxID()); err != nil {
					return idempotency.Response{}, err
				}
			}
			ctx = WithTargetID(ctx, a.TargetID)
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
		render(w, r, Problem{Status: http.StatusUnprocessableEntity, Code: apitypes.CodeKeyMismatch,
			Message: "this Idempotency-Key was already used for a different request"})
		return
	case errors.Is(err, idempotency.ErrKeyInFlight):
		render(w, r, Problem{Status: http.StatusConflict, Code: apitypes.CodeKeyInFlight,
			Message: "a request with this Idempotency-Key is still in progress; retry later"})
		return
	case err != nil:
		if r.Context().Err() == nil {
			render(w, r, err)
		}
		return
	}
	if outcome == idempotency.Replayed {
		w.Header().Set("Content-Type", "application/json")
		MarkReplayed(w)
	}
	for k, v := range header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

type targetKey struct{}

// WithTargetID returns a context that tells a KeyedCreate handler which id
// to make its resource under.
func WithTargetID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, targetKey{}, id)
}

// TargetID returns the id set by WithTargetID, or "" for a request without
// a key (the handler chooses an id itself).
func TargetID(ctx context.Context) string {
	id, _ := ctx.Value(targetKey{}).(string)
	return id
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
