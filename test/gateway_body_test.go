package sandpit_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestGatewayBodyToClosedPort: a request with a body through the E2B
// gateway to a port nothing listens on is answered at once, for every port
// and body size, and the daemon never panics on it (the request body was
// read by the proxy's transport and by the server at the same time). A
// closed port is 502; the interpreter's /execute is 401 without the
// sandbox's access token and, with it, 404 naming the template (the SDK
// reads 502 as a sandbox timeout).
func TestGatewayBodyToClosedPort(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("X-API-KEY", d.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb struct {
		SandboxID   string `json:"sandboxID"`
		AccessToken string `json:"envdAccessToken"`
	}
	err = json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if err != nil || sb.SandboxID == "" {
		t.Fatalf("E2B create: %d %v", resp.StatusCode, err)
	}
	if sb.AccessToken == "" {
		t.Fatal("E2B create answered no envdAccessToken")
	}
	cases := []struct {
		port, token string
		want        int
	}{
		{"49999", "", http.StatusUnauthorized},
		{"49999", sb.AccessToken, http.StatusNotFound},
		{"8080", "", http.StatusBadGateway},
		{"1", "", http.StatusBadGateway},
	}
	for _, tc := range cases {
		port := tc.port
		for _, size := range []int{10, 64 << 10, 1 << 20, 3 << 20} {
			body := strings.Repeat("x", size)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/envd/execute", strings.NewReader(body))
			req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
			req.Header.Set("E2b-Sandbox-Port", port)
			req.Header.Set("Content-Type", "application/json")
			if tc.token != "" {
				req.Header.Set("X-Access-Token", tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("port %s, %d bytes: %v", port, size, err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("port %s (token %t), %d bytes: %d, want %d", port, tc.token != "", size, resp.StatusCode, tc.want)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	if logs := d.Logs(); strings.Contains(logs, "panic") {
		t.Fatalf("the daemon panicked:\n%s", logs)
	}
}
