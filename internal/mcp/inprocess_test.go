package mcp

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestHandlerTransport(t *testing.T) {
	h := http.NewServeMux()
	h.HandleFunc("GET /ok", func(w http.ResponseWriter, r *http.Request) {
		if got := FromAuthorization(r.Header); got != "tok" {
			t.Errorf("token %q reached the handler", got)
		}
		w.Header().Set("X-Kind", "ok")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "line 1\n")
		_, _ = io.WriteString(w, "line 2\n")
	})
	h.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	})
	h.HandleFunc("GET /silent", func(w http.ResponseWriter, r *http.Request) {})
	h.HandleFunc("GET /panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	hc := &http.Client{Transport: handlerTransport{h}}

	req, _ := http.NewRequest(http.MethodGet, inProcessBase+"/ok", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Kind") != "ok" || string(body) != "line 1\nline 2\n" {
		t.Errorf("got %d %v %q", resp.StatusCode, resp.Header, body)
	}

	resp, err = hc.Post(inProcessBase+"/echo", "text/plain", strings.NewReader("ping"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ping" {
		t.Errorf("echo %q", body)
	}

	resp, err = hc.Get(inProcessBase + "/silent")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a handler that writes nothing answered %d", resp.StatusCode)
	}

	if _, err := hc.Get(inProcessBase + "/panic"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("a panicking handler gave %v", err)
	}
}

func TestFromAuthorization(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "Basic abc": "", "": "", "Bearer": ""} {
		if got := FromAuthorization(http.Header{"Authorization": {in}}); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// TestCappedBuffer: io.Copy, as the client's ReadFile uses, cannot write
// past the cap.
func TestCappedBuffer(t *testing.T) {
	b := &cappedBuffer{max: 10}
	if _, err := io.Copy(b, strings.NewReader(strings.Repeat("x", 11))); !errors.Is(err, errTooLarge) {
		t.Fatalf("copy of 11 bytes into a cap of 10: %v", err)
	}
	b = &cappedBuffer{max: 10}
	if _, err := io.Copy(b, strings.NewReader("0123456789")); err != nil || b.buf.String() != "0123456789" {
		t.Fatalf("copy of 10 bytes: %v %q", err, b.buf.String())
	}
}
