package harness

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestContractCatchesDrift runs the validating transport against a stand-in
// daemon whose answers are scripted: a correct answer passes, and each kind
// of drift (a field of the wrong type, a field the document does not have, a
// missing field, an undocumented status, an invalid request the daemon
// accepts) fails the exchange and is recorded.
func TestContractCatchesDrift(t *testing.T) {
	const goodSandbox = `{"id":"sbabc","image":"img","state":"running","labels":{},"env":{},"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`
	for _, tc := range []struct {
		name         string
		method, path string
		reqBody      string
		status       int
		respBody     string
		wantErr      string
	}{
		{"correct answer", "GET", "/v1/sandboxes/sbabc", "", 200, goodSandbox, ""},
		{"correct error", "GET", "/v1/sandboxes/sbx", "", 404, `{"error":{"code":"not_found","message":"no"}}`, ""},
		{"field of the wrong type", "GET", "/v1/sandboxes/sbabc", "", 200, strings.Replace(goodSandbox, `"state":"running"`, `"state":5`, 1), "does not match"},
		{"state outside the enum", "GET", "/v1/sandboxes/sbabc", "", 200, strings.Replace(goodSandbox, `"running"`, `"sleeping"`, 1), "does not match"},
		{"undocumented field", "GET", "/v1/sandboxes/sbabc", "", 200, strings.Replace(goodSandbox, `{`, `{"owner":"x",`, 1), "does not match"},
		{"missing field", "GET", "/v1/sandboxes/sbabc", "", 200, strings.Replace(goodSandbox, `"image":"img",`, ``, 1), "does not match"},
		{"unknown error code", "GET", "/v1/sandboxes/sbx", "", 404, `{"error":{"code":"gone","message":"no"}}`, "does not match"},
		{"undocumented success status", "DELETE", "/v1/sandboxes/sbabc", "", 200, goodSandbox, "does not match"},
		{"invalid request accepted", "POST", "/v1/sandboxes", `{"labels":{"a":1}}`, 201, goodSandbox, "accepted"},
		{"invalid request refused", "POST", "/v1/sandboxes", `{"labels":{"a":1}}`, 400, `{"error":{"code":"bad_request","message":"no"}}`, ""},
		{"unknown endpoint answered 404", "GET", "/v1/nowhere", "", 404, `{"error":{"code":"not_found","message":"no"}}`, ""},
		{"unknown endpoint answered 200", "GET", "/v1/nowhere", "", 200, `{}`, "describes no such operation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.respBody)
			}))
			defer srv.Close()
			c, err := LoadContract()
			if err != nil {
				t.Fatal(err)
			}
			hc := &http.Client{Transport: c.Transport(http.DefaultTransport)}
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.reqBody))
			req.Header.Set("Authorization", "Bearer x")
			if tc.reqBody != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := hc.Do(req)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid exchange refused: %v", err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != tc.respBody {
					t.Fatalf("body handed back = %q, want %q", b, tc.respBody)
				}
				if v := c.Violations(); len(v) != 0 {
					t.Fatalf("violations %v", v)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if len(c.Violations()) != 1 {
				t.Fatalf("violations = %v, want one", c.Violations())
			}
		})
	}
}
