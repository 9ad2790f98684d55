package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"
)

// uuidV4 is the shape of a generated key.
var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// script is a fake daemon that answers the n-th request with the n-th
// status (the last one repeats) and records each request's Idempotency-Key.
type script struct {
	t        *testing.T
	statuses []int
	code     string // error code of error answers
	// drop closes the connection instead of answering the first request.
	drop bool

	mu   sync.Mutex
	keys [][]string // Idempotency-Key values of each request
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.keys)
	s.keys = append(s.keys, r.Header.Values("Idempotency-Key"))
	s.mu.Unlock()
	if s.drop && n == 0 {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			s.t.Error(err)
			return
		}
		conn.Close()
		return
	}
	status := s.statuses[min(n, len(s.statuses)-1)]
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if status >= 300 {
		_, _ = w.Write([]byte(`{"error": {"code": "` + s.code + `", "message": "scripted"}}`))
		return
	}
	_, _ = w.Write([]byte(`{"id": "sbscripted", "exit_code": 0, "port": 8080}`))
}

func (s *script) requests() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}

// fast is a retry policy that keeps the tests quick.
func fast() RetryPolicy {
	return RetryPolicy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
}

func TestRetries(t *testing.T) {
	create := func(ctx context.Context, c *Client) error { _, err := c.Create(ctx, CreateRequest{}); return err }
	cases := []struct {
		name     string
		call     func(context.Context, *Client) error
		statuses []int
		code     string
		drop     bool
		attempts int
		keyed    bool
		wantErr  int // status of the expected error, 0 for success
	}{
		{name: "503 twice then 201", call: create, statuses: []int{503, 503, 201}, attempts: 3, keyed: true},
		{name: "429 502 504 then 201", call: create, statuses: []int{429, 502, 504, 201}, attempts: 4, keyed: true},
		{name: "dropped connection then 201", call: create, drop: true, statuses: []int{201}, attempts: 2, keyed: true},
		{name: "gives up after MaxAttempts", call: create, statuses: []int{503}, attempts: 4, keyed: true, wantErr: 503},
		{name: "400 is not retried", call: create, statuses: []int{400, 201}, attempts: 1, keyed: true, wantErr: 400},
		{name: "409 is not retried", call: create, statuses: []int{409, 201}, attempts: 1, keyed: true, wantErr: 409},
		{name: "500 is not retried", call: create, statuses: []int{500, 201}, attempts: 1, keyed: true, wantErr: 500},
		{name: "a full port pool is not retried", call: func(ctx context.Context, c *Client) error {
			_, err := c.ExposePort(ctx, "sb1", 8080, "tcp")
			return err
		}, statuses: []int{503, 201}, code: "port_pool_exhausted", attempts: 1, keyed: true, wantErr: 503},
		{name: "delete is retried with its key", call: func(ctx context.Context, c *Client) error {
			return c.Delete(ctx, "sb1")
		}, statuses: []int{502, 204}, attempts: 2, keyed: true},
		{name: "a template build is retried with its key", call: func(ctx context.Context, c *Client) error {
			_, err := c.BuildTemplate(ctx, BuildTemplateRequest{Name: "t", Dockerfile: "FROM scratch"})
			return err
		}, statuses: []int{503, 502, 202}, attempts: 3, keyed: true},
		{name: "a template delete is retried with its key", call: func(ctx context.Context, c *Client) error {
			return c.DeleteTemplate(ctx, "t")
		}, statuses: []int{504, 204}, attempts: 2, keyed: true},
		{name: "a template build conflict is not retried", call: func(ctx context.Context, c *Client) error {
			_, err := c.BuildTemplate(ctx, BuildTemplateRequest{Name: "t", Dockerfile: "FROM scratch"})
			return err
		}, statuses: []int{409, 202}, attempts: 1, keyed: true, wantErr: 409},
		{name: "exec is never retried", call: func(ctx context.Context, c *Client) error {
			_, err := c.Exec(ctx, "sb1", ExecRequest{Cmd: "true"})
			return err
		}, statuses: []int{503, 200}, attempts: 1, keyed: false, wantErr: 503},
		{name: "exec is not retried after a dropped connection", call: func(ctx context.Context, c *Client) error {
			_, err := c.Exec(ctx, "sb1", ExecRequest{Cmd: "true"})
			return err
		}, drop: true, statuses: []int{200}, attempts: 1, keyed: false, wantErr: -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{t: t, statuses: tc.statuses, code: tc.code, drop: tc.drop}
			srv := httptest.NewServer(s)
			defer srv.Close()
			err := tc.call(context.Background(), New(srv.URL, "tok", WithRetry(fast())))

			var apiErr *Error
			switch {
			case tc.wantErr == 0 && err != nil:
				t.Fatalf("call failed: %v", err)
			case tc.wantErr > 0 && (!errors.As(err, &apiErr) || apiErr.Status != tc.wantErr):
				t.Fatalf("got %v, want a %d error", err, tc.wantErr)
			case tc.wantErr < 0 && err == nil:
				t.Fatal("call succeeded, want the transport error")
			}
			reqs := s.requests()
			if len(reqs) != tc.attempts {
				t.Fatalf("%d requests, want %d", len(reqs), tc.attempts)
			}
			for i, keys := range reqs {
				switch {
				case !tc.keyed && len(keys) != 0:
					t.Fatalf("request %d carried Idempotency-Key %q", i, keys)
				case tc.keyed && (len(keys) != 1 || !uuidV4.MatchString(keys[0])):
					t.Fatalf("request %d: Idempotency-Key %q, want one UUID v4", i, keys)
				case tc.keyed && keys[0] != reqs[0][0]:
					t.Fatalf("request %d: key %q, want the first attempt's %q", i, keys[0], reqs[0][0])
				}
			}
		})
	}
}

// TestEachCallHasItsOwnKey: the key names one logical call; two creates are
// two requests, not a retry.
func TestEachCallHasItsOwnKey(t *testing.T) {
	s := &script{t: t, statuses: []int{201}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := New(srv.URL, "tok", WithRetry(fast()))
	for range 2 {
		if _, err := c.Create(context.Background(), CreateRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	reqs := s.requests()
	if len(reqs) != 2 || reqs[0][0] == reqs[1][0] {
		t.Fatalf("keys %q, want two different keys", reqs)
	}
}

// TestCallerChosenKey: a key the caller puts in the context is sent as is,
// by every attempt of the call, and by a second call with the same context.
func TestCallerChosenKey(t *testing.T) {
	s := &script{t: t, statuses: []int{503, 201}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := New(srv.URL, "tok", WithRetry(fast()))
	ctx := WithIdempotencyKey(context.Background(), "mcp-chosen")
	for range 2 {
		if _, err := c.Create(ctx, CreateRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	reqs := s.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3 (a retried call and one more)", len(reqs))
	}
	for i, k := range reqs {
		if len(k) != 1 || k[0] != "mcp-chosen" {
			t.Errorf("request %d: keys %q, want [mcp-chosen]", i, k)
		}
	}
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	policies := []struct {
		name   string
		policy RetryPolicy
		base   time.Duration
		max    time.Duration
	}{
		{"explicit", RetryPolicy{MaxAttempts: 10, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond}, 10 * time.Millisecond, 100 * time.Millisecond},
		// Zero fields take the documented defaults rather than a zero
		// delay (which made the jitter panic).
		{"zero fields", RetryPolicy{MaxAttempts: 3}, 100 * time.Millisecond, 3 * time.Second},
		{"zero policy", RetryPolicy{}, 100 * time.Millisecond, 3 * time.Second},
	}
	for _, p := range policies {
		t.Run(p.name, func(t *testing.T) {
			c := New("127.0.0.1:1", "tok", WithRetry(p.policy))
			for attempt := 1; attempt <= 40; attempt++ {
				ceiling := p.max
				if attempt < 20 && p.base<<(attempt-1) < p.max {
					ceiling = p.base << (attempt - 1)
				}
				seen := map[time.Duration]bool{}
				for range 50 {
					d := c.backoff(attempt, errors.New("transport"))
					if d <= 0 || d > ceiling {
						t.Fatalf("attempt %d: backoff %v, want within (0, %v]", attempt, d, ceiling)
					}
					seen[d] = true
				}
				if len(seen) < 2 {
					t.Fatalf("attempt %d: 50 backoffs all %v, want jitter", attempt, seen)
				}
			}
		})
	}
	// The server's Retry-After wins, within the cap.
	c := New("127.0.0.1:1", "tok", WithRetry(RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Second}))
	if d := c.backoff(1, &retryAfterError{&Error{Status: 503}, 10 * time.Second}); d != 2*time.Second {
		t.Fatalf("Retry-After 10s with a 2s cap: %v", d)
	}
}
