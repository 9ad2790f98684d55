package api_test

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// FuzzIdempotencyKey checks the one key validator against the two
// definitions the wires use: 1-255 printable ASCII characters (the native
// API, Daytona), and 1-255 lowercase ASCII letters, digits or hyphens (E2B).
func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{"", "a", "key-1", "Key-1", "tab\there", "ünïcode", "a_b", string(make([]byte, 256))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		printable, e2b := len(k) >= 1 && len(k) <= 255, len(k) >= 1 && len(k) <= 255
		for _, c := range []byte(k) {
			if c < ' ' || c > '~' {
				printable = false
			}
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				e2b = false
			}
		}
		if got := api.KeyPrintable.Valid(k); got != printable {
			t.Fatalf("KeyPrintable.Valid(%q) = %v, want %v", k, got, printable)
		}
		if got := api.KeyE2B.Valid(k); got != e2b {
			t.Fatalf("KeyE2B.Valid(%q) = %v, want %v", k, got, e2b)
		}
	})
}

// TestIdempotencyKeyHeader: a missing header is no key, one valid header is
// the key, and two headers or a malformed one is ErrInvalidKey, which
// classifies as 400 invalid_idempotency_key.
func TestIdempotencyKeyHeader(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []string
		format  api.KeyFormat
		key     string
		present bool
		bad     bool
	}{
		{"absent", nil, api.KeyPrintable, "", false, false},
		{"printable", []string{"Job 42/a"}, api.KeyPrintable, "Job 42/a", true, false},
		{"e2b", []string{"job-42-a"}, api.KeyE2B, "job-42-a", true, false},
		{"e2b uppercase", []string{"Job-42"}, api.KeyE2B, "", true, true},
		{"e2b underscore", []string{"job_42"}, api.KeyE2B, "", true, true},
		{"empty", []string{""}, api.KeyPrintable, "", true, true},
		{"two", []string{"a", "b"}, api.KeyPrintable, "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", nil)
			for _, h := range tc.headers {
				r.Header.Add("Idempotency-Key", h)
			}
			key, present, err := api.IdempotencyKey(r, tc.format)
			if key != tc.key || present != tc.present || (err != nil) != tc.bad {
				t.Fatalf("got (%q, %v, %v), want (%q, %v, bad=%v)", key, present, err, tc.key, tc.present, tc.bad)
			}
			if tc.bad {
				if !errors.Is(err, api.ErrInvalidKey) {
					t.Fatalf("err = %v, want ErrInvalidKey", err)
				}
				if p := api.Classify(err); p.Status != 400 || p.Code != "invalid_idempotency_key" {
					t.Fatalf("classified as %d %s", p.Status, p.Code)
				}
			}
		})
	}
}
