package caddy

import (
	"encoding/json"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/router"
)

// TestObjectIDRoundTrip checks that every route kind's @id parses back into
// the route it was made from, that ids of other owners (or none) are not
// taken as sandpit's, and that the upstream is found in the objects sandpit
// writes.
func TestObjectIDRoundTrip(t *testing.T) {
	c, err := New(Options{Admin: "http://127.0.0.1:2019", Listen: "127.0.0.1:7480", Domain: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	routes := []router.Route{
		{Kind: router.KindHTTP, SandboxID: "sbabc", Port: 8080, Upstream: "172.17.0.2:8080"},
		{Kind: router.KindHTTP, SandboxID: "sbabc", Port: 49983, Upstream: "172.17.0.2:49983"},
		{Kind: router.KindDomain, SandboxID: "sbabc", Hostname: "shop.example.com", Upstream: "172.17.0.2:3000"},
		{Kind: router.KindTCP, SandboxID: "sbabc", Port: 5432, HostPort: 22001, Upstream: "172.17.0.2:5432"},
		{Kind: router.KindHTTP, SandboxID: "sbabc", Port: 8081, Upstream: "172.17.0.2:8081", TrafficToken: "tok", TokenHeader: router.PreviewTokenHeader},
		{Kind: router.KindAnyPort, SandboxID: "sbabc", Upstream: "172.17.0.2:0", TrafficToken: "tok"},
	}
	for _, r := range routes {
		t.Run(r.Key(), func(t *testing.T) {
			got, ok := c.parseID(c.objectID(r))
			want := r
			want.Upstream, want.TrafficToken, want.TokenHeader = "", "", ""
			if !ok || got != want {
				t.Fatalf("parseID(%q) = %+v %v, want %+v", c.objectID(r), got, ok, want)
			}
			obj := c.httpRoute(r)
			if r.Kind == router.KindTCP {
				obj = c.tcpServer(r)
			}
			wantDial := r.Upstream
			if r.Kind == router.KindAnyPort {
				// The port the host names, not port 0.
				wantDial = "172.17.0.2:{http.regexp." + anyPortCapture + ".1}"
			}
			if d := firstDial(toJSON(t, obj)); d != wantDial {
				t.Fatalf("firstDial = %q, want %q", d, wantDial)
			}
		})
	}
	for _, id := range []string{"", "hand-made", "sandpit_fallback", "sandpit_tls", "other_http_sbabc_8080", "sandpit_http_sbabc", "sandpit_tcp_x_sbabc_1"} {
		if r, ok := c.parseID(id); ok {
			t.Errorf("parseID(%q) = %+v, want not sandpit's route", id, r)
		}
	}
}

// TestHostMatches reads Caddy host matcher entries as Caddy does: exact
// names and whole-label wildcards.
func TestHostMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		want          bool
	}{
		{"api.example.com", "api.example.com", true},
		{"API.Example.com.", "api.example.com", true},
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "a.b.example.com", false},
		{"api.*.com", "api.example.com", true},
		{"api.example.com", "www.example.com", false},
	} {
		if got := hostMatches(tc.pattern, tc.host); got != tc.want {
			t.Errorf("hostMatches(%q, %q) = %v, want %v", tc.pattern, tc.host, got, tc.want)
		}
	}
}

// TestSetPathNesting checks where a value is written when parents are
// missing: at the deepest existing level, wrapped in the missing ones.
func TestSetPathNesting(t *testing.T) {
	root := map[string]any{"admin": map[string]any{}, "apps": map[string]any{"http": map[string]any{"servers": map[string]any{}}}}
	cases := []struct {
		path  []string
		depth int
	}{
		{[]string{"apps", "http", "servers", "sandpit"}, 3},
		{[]string{"apps", "layer4"}, 1},
		{[]string{"apps", "tls", "automation", "policies"}, 1},
		{[]string{"storage"}, 0},
	}
	for _, tc := range cases {
		if _, depth, ok := lookup(root, tc.path...); ok || depth != tc.depth {
			t.Errorf("lookup %v: depth %d ok %v, want depth %d and missing", tc.path, depth, ok, tc.depth)
		}
	}
	if _, depth, ok := lookup(root, "apps", "http"); !ok || depth != 2 {
		t.Errorf("lookup of an existing path: depth %d ok %v", depth, ok)
	}
	got := toJSON(t, nest(1, "a", "b"))
	if !sameJSON(got, map[string]any{"a": map[string]any{"b": 1}}) {
		t.Errorf("nest = %v", got)
	}
}

func toJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
