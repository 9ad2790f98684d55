// Package client is the Go SDK of Sandpit's native API. Every mutating call
// carries an automatically generated Idempotency-Key and is retried on
// transport errors, 429, 502, 503 and 504 with the same key, so a retry never
// makes a second resource.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandpit-dev/sandpit/apitypes"
)

// Client talks to one Sandpit daemon.
type Client struct {
	base  string
	token string
	http  *http.Client
	retry RetryPolicy
}

// idempotencyKeyCtx is the context key of a caller-chosen Idempotency-Key.
type idempotencyKeyCtx struct{}

// WithIdempotencyKey returns ctx carrying key as the Idempotency-Key of the
// mutating calls made with it, instead of a fresh one per call. A caller
// that has its own name for a logical operation (a request id it may send
// again after a lost answer) passes it here, so that the repeat is the same
// request to the daemon and makes nothing twice. Use one key for one call:
// the daemon refuses a key reused for a different request.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKeyCtx{}, key)
}

func idempotencyKeyFrom(ctx context.Context) string {
	k, _ := ctx.Value(idempotencyKeyCtx{}).(string)
	return k
}

// RetryPolicy bounds the retries of a call. Zero fields take the defaults
// noted; MaxAttempts 1 turns retries off.
type RetryPolicy struct {
	MaxAttempts int           // including the first; default 5
	BaseDelay   time.Duration // default 100ms
	MaxDelay    time.Duration // default 3s
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the HTTP client.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetry replaces the retry policy.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p.withDefaults() } }

// withDefaults fills the zero fields. A zero delay is not "retry at once": the
// jitter needs a positive range, and hammering a struggling daemon is what
// the backoff exists to avoid.
func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 100 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 3 * time.Second
	}
	return p
}

// New returns a client for the daemon at addr ("127.0.0.1:7420" or a URL).
func New(addr, token string, opts ...Option) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	c := &Client{base: strings.TrimRight(addr, "/"), token: token, http: &http.Client{}}
	c.retry = RetryPolicy{}.withDefaults()
	for _, o := range opts {
		o(c)
	}
	return c
}

// FromEnv builds a client from SANDPIT_ADDR and SANDPIT_TOKEN, falling back to
// 127.0.0.1:7420 and the token file in the local data directory.
func FromEnv(defaultDataDir string) (*Client, error) {
	addr := os.Getenv("SANDPIT_ADDR")
	if addr == "" {
		addr = "127.0.0.1:7420"
	}
	token := os.Getenv("SANDPIT_TOKEN")
	if token == "" {
		dir := os.Getenv("SANDPIT_DATA_DIR")
		if dir == "" {
			dir = defaultDataDir
		}
		t, err := ReadTokenFile(dir + "/token")
		if err != nil {
			return nil, fmt.Errorf("no SANDPIT_TOKEN and no token file in %s: %w", dir, err)
		}
		token = t
	}
	return New(addr, token), nil
}

// ReadTokenFile reads a token from the first line of a file. The error names
// the file, never its content.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// Error is a non-2xx answer of the API.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// IsCode reports whether err is an API error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// request describes one call.
type request struct {
	method string
	path   string
	query  url.Values
	body   any    // JSON-encoded when non-nil
	raw    []byte // sent as-is when body is nil
	// idempotent marks a call that is safe to retry: reads, and writes that
	// carry an Idempotency-Key.
	idempotent bool
	keyed      bool
	header     http.Header
	// progress, when set, is told how many bytes of raw have been sent.
	progress func(sent int64)
}

// Response is a finished call's status and headers, for callers that care.
type Response struct {
	Status int
	Header http.Header
}

func (c *Client) do(ctx context.Context, rq request, out any) (Response, error) {
	var payload []byte
	if rq.body != nil {
		b, err := json.Marshal(rq.body)
		if err != nil {
			return Response{}, err
		}
		payload = b
	} else {
		payload = rq.raw
	}
	key := ""
	if rq.keyed {
		key = idempotencyKeyFrom(ctx)
		if key == "" {
			key = uuid.NewString()
		}
	}
	attempts := c.retry.MaxAttempts
	if attempts < 1 || !rq.idempotent {
		attempts = 1
	}
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, c.backoff(attempt, lastErr)); err != nil {
				return Response{}, err
			}
		}
		resp, err := c.once(ctx, rq, payload, key, out)
		if err == nil {
			return resp, nil
		}
		lastErr = err
		if !retryable(err) || ctx.Err() != nil {
			return resp, err
		}
	}
	return Response{}, lastErr
}

func (c *Client) once(ctx context.Context, rq request, payload []byte, key string, out any) (Response, error) {
	u := c.base + rq.path
	if len(rq.query) > 0 {
		u += "?" + rq.query.Encode()
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
		if rq.progress != nil {
			body = &countingReader{r: body, f: rq.progress}
		}
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, u, body)
	if err != nil {
		return Response{}, err
	}
	if payload != nil {
		req.ContentLength = int64(len(payload))
	}
	for k, vs := range rq.header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if rq.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Response{}, &transportError{err}
	}
	defer resp.Body.Close()
	r := Response{Status: resp.StatusCode, Header: resp.Header}
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		e := &Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
		var eb apitypes.ErrorBody
		var agent struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(b, &eb) == nil && eb.Error.Code != "":
			e.Code, e.Message = eb.Error.Code, eb.Error.Message
		case json.Unmarshal(b, &agent) == nil && agent.Code == resp.StatusCode && agent.Message != "":
			// The sandbox's agent answers file calls the daemon passes
			// through in the E2B envd shape, {"code":404,"message":...}.
			e.Message = agent.Message
		}
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			return r, &retryAfterError{e, time.Duration(ra) * time.Second}
		}
		return r, e
	}
	switch o := out.(type) {
	case nil:
		_, _ = io.Copy(io.Discard, resp.Body)
	case io.Writer:
		if _, err := io.Copy(o, resp.Body); err != nil {
			return r, &transportError{err}
		}
	default:
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return r, &transportError{fmt.Errorf("decode response: %w", err)}
		}
	}
	return r, nil
}

type transportError struct{ err error }

func (e *transportError) Error() string { return "transport: " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// retryAfterError is an API error whose answer named a Retry-After delay.
type retryAfterError struct {
	apiErr *Error
	after  time.Duration
}

func (e *retryAfterError) Error() string { return e.apiErr.Error() }
func (e *retryAfterError) Unwrap() error { return e.apiErr }

func retryable(err error) bool {
	var te *transportError
	if errors.As(err, &te) {
		var ne net.Error
		return errors.As(te.err, &ne) || errors.Is(te.err, io.ErrUnexpectedEOF) || errors.Is(te.err, io.EOF) ||
			strings.Contains(te.err.Error(), "connection reset") || strings.Contains(te.err.Error(), "connection refused")
	}
	var e *Error
	if errors.As(err, &e) {
		switch e.Status {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			// A full port pool is a 503, and an owner's quota a 429, that
			// no retry will cure.
			return e.Code != apitypes.CodePortPoolExhausted && e.Code != apitypes.CodeQuotaExceeded
		}
	}
	return false
}

// backoff is capped exponential backoff with full jitter, or the server's
// Retry-After when it gave one.
func (c *Client) backoff(attempt int, last error) time.Duration {
	var ra *retryAfterError
	if errors.As(last, &ra) && ra.after > 0 {
		return min(ra.after, c.retry.MaxDelay)
	}
	d := c.retry.BaseDelay << (attempt - 1)
	if d <= 0 || d > c.retry.MaxDelay {
		d = c.retry.MaxDelay
	}
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// countingReader reports the running total read through it.
type countingReader struct {
	r io.Reader
	n int64
	f func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.f(c.n)
	return n, err
}
