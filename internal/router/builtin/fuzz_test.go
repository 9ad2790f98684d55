package builtin

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/router"
)

// FuzzPreviewHost parses arbitrary preview labels and Host headers: a parsed
// label has a port in range and a non-empty id and formats back to itself,
// and Resolve routes a host only to an installed route.
func FuzzPreviewHost(f *testing.F) {
	for _, s := range []string{"sbabc-3000", "3000-sbabc", "sbabc-0", "-3000", "3000-", "sb-a-b-8080", "99999-x", "sbabc-3000.localhost", "SBABC-3000.LOCALHOST.:80", "a.example.com", "[::1]:80", "1-2-3"} {
		f.Add(s)
	}
	b := New(Options{Domain: "localhost"})
	ctx := context.Background()
	_ = b.Install(ctx, router.Route{Kind: router.KindHTTP, SandboxID: "sbabc", Port: 3000, Upstream: "127.0.0.1:1"})
	_ = b.Install(ctx, router.Route{Kind: router.KindDomain, SandboxID: "sbabc", Port: 80, Hostname: "a.example.com", Upstream: "127.0.0.1:1"})
	f.Fuzz(func(t *testing.T, s string) {
		if id, port, ok := sandpit.ParsePreviewLabel(s); ok {
			if id == "" || port < 1 || port > 65535 {
				t.Fatalf("ParsePreviewLabel(%q) = %q, %d", s, id, port)
			}
			if !strings.Contains(s, id) || !strings.Contains(s, strconv.Itoa(port)) {
				t.Fatalf("ParsePreviewLabel(%q) = %q, %d: not parts of the label", s, id, port)
			}
			if id2, port2, ok2 := sandpit.ParsePreviewLabel(id + "-" + strconv.Itoa(port)); !ok2 || id2 != id || port2 != port {
				if id[0] < '0' || id[0] > '9' {
					t.Fatalf("%q-%d does not parse back: %q %d %v", id, port, id2, port2, ok2)
				}
			}
		}
		if r, ok := b.Resolve(s); ok && r.SandboxID != "sbabc" {
			t.Fatalf("Resolve(%q) found a route never installed: %+v", s, r)
		}
	})
}
