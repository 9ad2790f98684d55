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
// gateway to a port nothing listens on is answered 502 at once, for every
// port and body size, and the daemon never panics on it (the request body
// was read by the proxy's transport and by the server at the same time).
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
		SandboxID string `json:"sandboxID"`
	}
	err = json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if err != nil || sb.SandboxID == "" {
		t.Fatalf("E2B create: %d %v", resp.StatusCode, err)
	}
	for _, port := range []string{"49999", "8080", "1"} {
		for _, size := range []int{10, 64 << 10, 1 << 20, 3 << 20} {
			body := strings.Repeat("x", size)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/envd/execute", strings.NewReader(body))
			req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
			req.Header.Set("E2b-Sandbox-Port", port)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("port %s, %d bytes: %v", port, size, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("port %s, %d bytes: %d, want 502", port, size, resp.StatusCode)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	if logs := d.Logs(); strings.Contains(logs, "panic") {
		t.Fatalf("the daemon panicked:\n%s", logs)
	}
}
