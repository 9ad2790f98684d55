package sandpit_test

import (
	"context"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func TestParsePreviewLabel(t *testing.T) {
	cases := []struct {
		label  string
		id     string
		port   int
		wantOK bool
	}{
		{"sbabc-8080", "sbabc", 8080, true},
		{"49983-sbabc", "sbabc", 49983, true},
		{"sb-with-dashes-3000", "sb-with-dashes", 3000, true},
		{"sbabc", "", 0, false},
		{"sbabc-0", "", 0, false},
		{"sbabc-70000", "", 0, false},
		{"-8080", "", 0, false},
		{"8080-", "", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.label, func(t *testing.T) {
			id, port, ok := sandpit.ParsePreviewLabel(tc.label)
			if ok != tc.wantOK || (ok && (id != tc.id || port != tc.port)) {
				t.Fatalf("ParsePreviewLabel(%q) = %q %d %v, want %q %d %v", tc.label, id, port, ok, tc.id, tc.port, tc.wantOK)
			}
		})
	}
}

// TestParsePreviewHost: a Host is read against the preview domain in both
// label forms, whatever its case, port or trailing dot; a host not directly
// under the domain has no label and names no sandbox.
func TestParsePreviewHost(t *testing.T) {
	cases := []struct {
		host, domain    string
		wantHost, label string
		id              string
		port            int
		ok, portFirst   bool
	}{
		{"sbabc-8080.localhost", "localhost", "sbabc-8080.localhost", "sbabc-8080", "sbabc", 8080, true, false},
		{"49983-sbabc.Sandpit.Test.:443", "sandpit.test", "49983-sbabc.sandpit.test", "49983-sbabc", "sbabc", 49983, true, true},
		{"SBABC-3000.example.com", "Example.COM.", "sbabc-3000.example.com", "sbabc-3000", "sbabc", 3000, true, false},
		{"app.customer.test", "localhost", "app.customer.test", "", "", 0, false, false},
		{"a.sbabc-8080.localhost", "localhost", "a.sbabc-8080.localhost", "", "", 0, false, false},
		{"localhost", "localhost", "localhost", "", "", 0, false, false},
		{"api.localhost", "localhost", "api.localhost", "api", "", 0, false, false},
		{"sbabc-0.localhost", "localhost", "sbabc-0.localhost", "sbabc-0", "", 0, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			p := sandpit.ParsePreviewHost(tc.host, tc.domain)
			if p.Raw != tc.host || p.Host != tc.wantHost || p.Label != tc.label || p.OK != tc.ok ||
				p.SandboxID != tc.id || p.Port != tc.port || p.PortFirst() != tc.portFirst {
				t.Fatalf("ParsePreviewHost(%q, %q) = %+v (port first %v)", tc.host, tc.domain, p, p.PortFirst())
			}
		})
	}
}

// TestResolvePreviewHost: the first handler reads the host and the request
// carries the reading; a later handler gets it back without parsing, unless
// the Host was rewritten or the domain differs, when it reads the host anew.
func TestResolvePreviewHost(t *testing.T) {
	ctx := context.Background()
	first, carried, fresh := sandpit.ResolvePreviewHost(ctx, "sbabc-8080.localhost", "localhost")
	if !fresh || !first.OK || first.SandboxID != "sbabc" {
		t.Fatalf("first read = %+v fresh=%v", first, fresh)
	}
	cases := []struct {
		name, host, domain string
		fresh              bool
		id                 string
	}{
		{"same host is carried", "sbabc-8080.localhost", "localhost", false, "sbabc"},
		{"rewritten host is read anew", "sbdef-3000.localhost", "localhost", true, "sbdef"},
		{"another domain is read anew", "sbabc-8080.localhost", "example.com", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, next, fresh := sandpit.ResolvePreviewHost(carried, tc.host, tc.domain)
			if fresh != tc.fresh || p.SandboxID != tc.id {
				t.Fatalf("ResolvePreviewHost(%q, %q) = %+v fresh=%v, want fresh=%v id %q", tc.host, tc.domain, p, fresh, tc.fresh, tc.id)
			}
			if !fresh && next != carried {
				t.Fatal("a carried reading came back with a new context")
			}
		})
	}
}

// BenchmarkPreviewHost compares reading a host with getting back the
// reading an earlier handler carried: what each handler behind the first
// costs now, against what each paid parsing the host itself.
func BenchmarkPreviewHost(b *testing.B) {
	const host, domain = "49983-sbx0123456789abcdef.sandpit.example.com:443", "sandpit.example.com"
	b.Run("parse", func(b *testing.B) {
		for range b.N {
			_ = sandpit.ParsePreviewHost(host, domain)
		}
	})
	_, carried, _ := sandpit.ResolvePreviewHost(context.Background(), host, domain)
	b.Run("carried", func(b *testing.B) {
		for range b.N {
			_, _, _ = sandpit.ResolvePreviewHost(carried, host, domain)
		}
	})
}
