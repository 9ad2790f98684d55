package httpguard

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := NewLimiter(ClientLimits{UnauthRate: 2, FailureRate: 1,
		Exempt: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, Now: func() time.Time { return now }})
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}), func(r *http.Request) bool { return r.URL.Path == "/files" })
	do := func(remote, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = remote
		h.ServeHTTP(rec, req)
		return rec
	}
	// Unauthenticated: a burst of twice the rate, then 429 with Retry-After.
	for i := range 4 {
		if c := do("192.0.2.1:1000", "/files").Code; c != http.StatusOK {
			t.Fatalf("unauthenticated request %d: %d", i, c)
		}
	}
	rec := do("192.0.2.1:1000", "/files")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("past the burst: %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	// Authenticated requests of that client are not limited by it, and
	// another client has its own budget.
	if c := do("192.0.2.1:1001", "/v1/x").Code; c != http.StatusOK {
		t.Fatalf("authenticated request of a limited client: %d", c)
	}
	if c := do("192.0.2.2:1000", "/files").Code; c != http.StatusOK {
		t.Fatalf("another client: %d", c)
	}
	// A refill.
	now = now.Add(time.Second)
	if c := do("192.0.2.1:1000", "/files").Code; c != http.StatusOK {
		t.Fatalf("after a second: %d", c)
	}
	// Refused credentials: five of them, then every request is refused.
	for i := range 5 {
		if c := do("[2001:db8::1]:5", "/bad").Code; c != http.StatusUnauthorized {
			t.Fatalf("refused credential %d: %d", i, c)
		}
	}
	// The same /64 is the same client.
	if c := do("[2001:db8::2]:5", "/v1/x").Code; c != http.StatusTooManyRequests {
		t.Fatalf("after five refusals: %d", c)
	}
	if c := do("[2001:db8:0:1::2]:5", "/v1/x").Code; c != http.StatusOK {
		t.Fatalf("another /64: %d", c)
	}
	// Exempt clients are never limited.
	for i := range 20 {
		if c := do("10.9.1.1:5", "/bad").Code; c != http.StatusUnauthorized {
			t.Fatalf("exempt client, request %d: %d", i, c)
		}
	}
}

// TestLimiterFailureDelay: a refusal (401, and the limiter's own 429) is
// held at least half the delay before its answer, which is what slows a
// flood that waits for its answers.
func TestLimiterFailureDelay(t *testing.T) {
	const delay = 200 * time.Millisecond
	l := NewLimiter(ClientLimits{FailureRate: 1000, FailureDelay: delay})
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}), func(*http.Request) bool { return false })
	for _, c := range []struct {
		path string
		code int
		held bool
	}{
		{"/bad", http.StatusUnauthorized, true},
		{"/good", http.StatusOK, false},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, c.path, nil)
		req.RemoteAddr = "192.0.2.7:1000"
		start := time.Now()
		h.ServeHTTP(rec, req)
		took := time.Since(start)
		if rec.Code != c.code {
			t.Fatalf("%s: %d, want %d", c.path, rec.Code, c.code)
		}
		// Only the lower bound is certain: a refusal is held at least
		// delay/2 (the jitter's floor).
		if c.held && took < delay/2 {
			t.Errorf("%s answered after %v, want at least %v", c.path, took, delay/2)
		}
	}
}
