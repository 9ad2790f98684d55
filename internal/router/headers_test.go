package router

import (
	"net/http"
	"testing"
)

// TestStripForPreview: the preview proxy removes the daemon's credentials,
// its reserved cookies and every Sandpit-* header, and leaves what belongs
// to the sandbox's own application.
func TestStripForPreview(t *testing.T) {
	daemon := func(v string) bool { return v == "admin-secret" || len(v) > 4 && v[:4] == "spt_" }
	for _, tc := range []struct {
		name     string
		in       http.Header
		wantGone []string
		want     map[string]string
	}{
		{"admin token as bearer", http.Header{"Authorization": {"Bearer admin-secret"}}, []string{"Authorization"}, nil},
		{"personal token as bearer", http.Header{"Authorization": {"Bearer spt_0123_x"}}, []string{"Authorization"}, nil},
		{"bare token", http.Header{"Authorization": {"admin-secret"}}, []string{"Authorization"}, nil},
		{"E2B API key", http.Header{"X-Api-Key": {"spt_0123_x"}}, []string{"X-Api-Key"}, nil},
		{"the application's own bearer", http.Header{"Authorization": {"Bearer app-token"}}, nil, map[string]string{"Authorization": "Bearer app-token"}},
		{"the application's own API key", http.Header{"X-Api-Key": {"app-key"}}, nil, map[string]string{"X-Api-Key": "app-key"}},
		{"basic auth", http.Header{"Authorization": {"Basic dXNlcjpwdw=="}}, nil, map[string]string{"Authorization": "Basic dXNlcjpwdw=="}},
		{"internal headers", http.Header{"Sandpit-Principal": {"{}"}, "Sandpit-Forwarded-By": {"n1"}, "Sandpit-Preview": {"1"}}, []string{"Sandpit-Principal", "Sandpit-Forwarded-By", "Sandpit-Preview"}, nil},
		{"preview token", http.Header{"X-Daytona-Preview-Token": {"t"}}, []string{"X-Daytona-Preview-Token"}, nil},
		{"cookies", http.Header{"Cookie": {"sandpit_session=1; app=2", "SandpitX=3; b=4"}}, nil, map[string]string{"Cookie": "app=2; b=4"}},
		{"only reserved cookies", http.Header{"Cookie": {"sandpit=1"}}, []string{"Cookie"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in.Clone()
			StripForPreview(h, daemon)
			for _, k := range tc.wantGone {
				if v := h.Values(k); len(v) > 0 {
					t.Errorf("%s kept: %q", k, v)
				}
			}
			for k, v := range tc.want {
				if got := h.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}
