package daytona

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestPreviewGateCarriesTheReading: the gate reads a preview host once and
// the handler behind it receives that reading with the request, so it need
// not parse the host again; a signed host, which the gate rewrites to the
// port's ordinary host, goes on with the reading of the rewritten host.
func TestPreviewGateCarriesTheReading(t *testing.T) {
	svc, _ := testenv.FuzzService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := New(ctx, svc, api.NewAuth(svc.Identity(), testToken), Options{PreviewKey: []byte("preview key")})
	domain := svc.Config().Domain
	signed := "8080-" + h.sandboxes.signPreview("sbabc", 8080, time.Now().Add(time.Hour)) + "." + domain
	cases := []struct {
		name, host, wantHost, wantID string
		wantPort                     int
	}{
		{"ordinary host", "sbabc-8080." + domain + ":80", "sbabc-8080." + domain + ":80", "sbabc", 8080},
		{"E2B's form", "8080-sbabc." + domain, "8080-sbabc." + domain, "sbabc", 8080},
		{"signed host", signed, "sbabc-8080." + domain, "sbabc", 8080},
		{"not a preview host", "app.customer.test", "app.customer.test", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				got      sandpit.PreviewHost
				gotHost  string
				reparsed = true
			)
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotHost = r.Host
				got, _, reparsed = sandpit.ResolvePreviewHost(r.Context(), r.Host, domain)
			})
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Host = tc.host
			rec := httptest.NewRecorder()
			h.PreviewGate(next).ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("gate answered %d: %s", rec.Code, rec.Body)
			}
			if reparsed {
				t.Error("the handler behind the gate had to read the host again")
			}
			if gotHost != tc.wantHost || got.SandboxID != tc.wantID || got.Port != tc.wantPort {
				t.Errorf("behind the gate: host %q, reading %+v; want host %q, sandbox %q port %d", gotHost, got, tc.wantHost, tc.wantID, tc.wantPort)
			}
		})
	}
}
