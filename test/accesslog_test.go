package sandpit_test

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestAccessLog: every request gets an X-Request-Id (the client's, or a
// generated one) echoed in the response, and one structured log line names
// the method, the route pattern, the sandbox, the status, the bytes, the
// latency and that id.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, d.Client())

	get := func(path, reqID string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+d.Token)
		if reqID != "" {
			req.Header.Set("X-Request-Id", reqID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, tc := range []struct {
		name, path, reqID, wantRoute string
		wantStatus                   int
		wantSandbox                  bool
	}{
		{"client id kept", "/v1/sandboxes/" + id, "trace-abc-123", "GET /v1/sandboxes/{id}", 200, true},
		{"generated id", "/v1/sandboxes", "", "GET /v1/sandboxes", 200, false},
		{"forged id replaced", "/v1/sandboxes/nope", "forged id with spaces", "GET /v1/sandboxes/{id}", 404, false},
		{"unknown route", "/nowhere", "trace-404", "", 404, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := get(tc.path, tc.reqID)
			got := resp.Header.Get("X-Request-Id")
			switch {
			case resp.StatusCode != tc.wantStatus:
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			case tc.reqID != "" && !strings.Contains(tc.reqID, " ") && got != tc.reqID:
				t.Fatalf("X-Request-Id = %q, want the client's %q", got, tc.reqID)
			case (tc.reqID == "" || strings.Contains(tc.reqID, " ")) && !regexp.MustCompile(`^[0-9a-f]{24}$`).MatchString(got):
				t.Fatalf("X-Request-Id = %q, want a generated id", got)
			}
			line := ""
			testkit.Eventually(t, 5*time.Second, "access log line", func() error {
				for _, l := range strings.Split(d.Logs(), "\n") {
					if strings.Contains(l, "msg=\"http request\"") && strings.Contains(l, "request_id="+got) {
						line = l
						return nil
					}
				}
				return errors.New("not logged yet")
			})
			for _, want := range []string{"method=GET", "path=" + tc.path, "status=" + itoa(tc.wantStatus), "bytes=", "latency="} {
				if !strings.Contains(line, want) {
					t.Errorf("log line %q lacks %q", line, want)
				}
			}
			if tc.wantRoute != "" && !strings.Contains(line, `route="`+tc.wantRoute+`"`) {
				t.Errorf("log line %q lacks route %q", line, tc.wantRoute)
			}
			if tc.wantSandbox && !strings.Contains(line, "sandbox="+id) {
				t.Errorf("log line %q lacks sandbox=%s", line, id)
			}
		})
	}
}
