package httpguard_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// echoLen answers with the number of body bytes it could read, or the
// reason it could not.
var echoLen = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	switch {
	case httpguard.IsTooLarge(err):
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	case err != nil:
		w.WriteHeader(http.StatusBadRequest)
	}
	fmt.Fprint(w, n)
})

func TestGuardBodySize(t *testing.T) {
	srv := httptest.NewServer(httpguard.Guard(echoLen, httpguard.Options{MaxBody: 100, ReadTimeout: 5 * time.Second}))
	defer srv.Close()
	for _, tc := range []struct {
		name    string
		body    io.Reader
		size    int64 // -1: chunked
		want    int
		wantLen string
	}{
		{"within, with a length", strings.NewReader(strings.Repeat("a", 100)), 100, 200, "100"},
		{"over, with a length", strings.NewReader(strings.Repeat("a", 101)), 101, 413, ""},
		{"within, chunked", io.MultiReader(strings.NewReader(strings.Repeat("a", 50))), -1, 200, "50"},
		{"over, chunked", io.MultiReader(strings.NewReader(strings.Repeat("a", 500))), -1, 413, "100"},
		{"no body", nil, 0, 200, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, tc.body)
			req.ContentLength = tc.size
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || (tc.wantLen != "" && string(b) != tc.wantLen) {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, b, tc.want, tc.wantLen)
			}
		})
	}
}

// TestGuardCutsSlowBody: a handler that answers without reading the body
// (as an authentication failure does) does not keep the connection open
// for a body trickling in; one whose body arrived is not cut afterwards.
func TestGuardCutsSlowBody(t *testing.T) {
	slowHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/read-then-wait" {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-time.After(700 * time.Millisecond):
				fmt.Fprint(w, "done")
			case <-r.Context().Done():
				t.Error("the request's context ended after its body was read")
			}
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})
	srv := httptest.NewServer(httpguard.Guard(slowHandler, httpguard.Options{MaxBody: 1 << 20, ReadTimeout: 300 * time.Millisecond}))
	defer srv.Close()

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /deny HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("response %v %v", resp, err)
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("the connection was not closed: %v", err)
	}

	resp2, err := http.Post(srv.URL+"/read-then-wait", "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if string(b) != "done" {
		t.Fatalf("long handler after its body: %q", b)
	}
}
