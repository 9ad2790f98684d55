package sandpit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path every package of this repository starts with.
const module = "github.com/sandpit-dev/sandpit"

// The layering of the module, in module-relative import paths ("." is the
// module's root package, the domain types). A pattern ending in "/..." is
// that package and everything under it; an exact path is more specific
// than a pattern, and a longer pattern more specific than a shorter one.
//
// Dependencies point one way: api -> service -> {store, driver, router,
// cluster}, with the contracts and shared leaf packages at the bottom. The
// agent runs inside the sandbox and imports only its contract
// (internal/agentapi) and leaves. Only the packages' own files count, not
// their tests: a test may reach across layers to set up what it checks.
//
// Every package of the module must match a row: a new package is reported
// until someone writes down where it belongs and what it may import. The
// same map, in prose, is the README's layout section.
var layers = []struct {
	pkg  string   // the package(s) the row places
	may  []string // the module packages they may import directly
	what string   // what they hold, for the failure message
}{
	// Contracts and shared leaves: they import nothing of the module but
	// generated code.
	{".", nil, "the domain types every layer shares"},
	{"apitypes", nil, "the wire contract of /v1"},
	{"api/openapi", nil, "the OpenAPI document of /v1"},
	{"proto/...", []string{"proto/..."}, "the agent protocol's generated code"},
	{"internal/agentapi", []string{"proto/..."}, "the daemon-agent contract"},
	{"internal/crashpoint", nil, "crash points for crash tests"},
	{"internal/filesig", nil, "signatures of E2B's signed file URLs"},
	{"internal/httpguard", nil, "bounds on one HTTP request's cost"},
	{"internal/ui", nil, "the embedded web dashboard"},
	{"internal/agentbin", nil, "the small agent the daemon embeds"},
	{"internal/interpreter", nil, "the client of the in-sandbox code interpreter"},
	{"internal/dockerfile", nil, "a Dockerfile read with BuildKit's parser: the images a build reads"},
	{"internal/timing", nil, "the per-request phase collector behind Server-Timing"},

	// The Go SDK and the agent stand apart from the daemon.
	{"client", []string{"apitypes", "proto/..."}, "the Go SDK of /v1"},
	{"internal/agent", []string{"internal/agentapi", "proto/...", "internal/filesig", "internal/crashpoint", "internal/httpguard"}, "the in-sandbox agent"},

	// Below the service.
	{"internal/store", []string{".", "internal/crashpoint"}, "the single SQLite writer"},
	{"internal/driver", []string{".", "internal/agentapi"}, "the seam to what runs sandboxes"},
	{"internal/driver/...", []string{".", "internal/driver", "internal/agentapi", "internal/crashpoint"}, "a runtime"},
	{"internal/router", []string{".", "internal/httpguard"}, "the seam to what carries traffic"},
	{"internal/router/...", []string{".", "internal/router/...", "internal/httpguard", "internal/crashpoint"}, "a router"},
	{"internal/firewall", []string{"."}, "the sandboxes' packet filter"},
	{"internal/egress", []string{".", "internal/firewall", "internal/httpguard"}, "the egress proxy and DNS server that enforce rules on names"},
	{"internal/metrics", []string{".", "internal/driver"}, "the Prometheus instrumentation"},
	{"internal/cluster", []string{".", "internal/httpguard", "internal/crashpoint"}, "the Raft index and membership"},
	{"internal/idempotency", []string{".", "internal/store", "internal/metrics", "internal/crashpoint"}, "the idempotency engine"},
	{"internal/events", []string{".", "internal/egress"}, "the bus every state change is published on"},
	{"internal/desktop", nil, "the scripts that drive a sandbox's desktop, which the surfaces run through its agent"},
	{"internal/identity", []string{".", "internal/store", "internal/idempotency"}, "who a request acts as: principals, owner scoping, audit, tokens, owners' limits, sessions, SSH keys"},
	{"internal/secrets", []string{".", "internal/store", "internal/identity"}, "the secrets aggregate: owners' sealed values and their key"},
	{"internal/volumes", []string{".", "internal/store", "internal/driver", "internal/identity", "internal/events", "internal/cluster", "internal/crashpoint"}, "the volumes aggregate"},

	// The template aggregate: builds, contexts, logs, snapshot images and
	// their replication; beside the service, never through it.
	{"internal/templates", []string{
		".", "internal/crashpoint", "internal/store", "internal/driver", "internal/cluster", "internal/idempotency",
		"internal/metrics", "internal/dockerfile", "internal/events", "internal/identity",
	}, "the template aggregate"},

	// The service: domain operations over everything below it.
	{"internal/service", []string{
		".", "internal/agentapi", "proto/...", "internal/crashpoint", "internal/filesig", "internal/httpguard",
		"internal/store", "internal/driver", "internal/router/...", "internal/cluster", "internal/idempotency",
		"internal/metrics", "internal/firewall", "internal/egress", "internal/interpreter", "internal/dockerfile",
		"internal/events", "internal/timing", "internal/identity", "internal/volumes", "internal/templates",
	}, "the domain operations"},

	// The HTTP surfaces: through the service, never the store, a runtime or
	// a router (what they share with those, such as Stats and the preview
	// headers, is the root package's).
	{"internal/api/...", []string{
		".", "apitypes", "internal/agentapi", "proto/...", "internal/crashpoint", "internal/filesig", "internal/httpguard",
		"internal/api", "internal/service", "internal/cluster", "internal/idempotency", "internal/metrics",
		"internal/interpreter", "internal/events", "internal/timing", "internal/identity", "internal/volumes",
		"internal/templates", "internal/secrets", "internal/api/route", "internal/api/agentrelay", "internal/desktop",
	}, "an HTTP surface"},
	// The route declarations are a leaf, so that the gateway reads them
	// without compiling the surfaces' domain.
	{"internal/api/route", []string{".", "apitypes"}, "the route declarations the surfaces make and the gateway reads"},
	{"internal/sshd", []string{".", "internal/agentapi", "proto/..."}, "the SSH endpoint into sandboxes, through the service's interface"},
	{"internal/gateway", []string{
		".", "apitypes", "internal/httpguard", "internal/crashpoint",
		"internal/api/route", "internal/cluster",
	}, "the cluster's HTTP gateway"},

	// The MCP server acts through the Go SDK of /v1, so that owner
	// scoping, scopes and idempotency apply to it exactly as to /v1.
	{"internal/mcp", []string{"client", "internal/desktop"}, "the MCP server"},

	// The assembly and the binary.
	{"internal/daemon", []string{
		".", "apitypes", "api/openapi", "internal/agentapi", "internal/crashpoint", "internal/filesig", "internal/httpguard", "internal/ui",
		"internal/store", "internal/driver/...", "internal/router/...", "internal/firewall", "internal/egress", "internal/metrics", "internal/cluster", "internal/idempotency",
		"internal/service", "internal/api/...", "internal/gateway", "internal/agentbin", "internal/sshd",
		"internal/mcp", "internal/events", "internal/identity",
		"internal/templates", "internal/secrets",
	}, "the daemon's assembly"},
	{"cmd/sandpit", []string{
		".", "apitypes", "client", "internal/agent", "internal/agentapi", "internal/httpguard",
		"internal/cluster", "internal/service", "internal/daemon", "internal/mcp", "internal/identity",
		"internal/templates",
	}, "the binary's subcommands"},
	{"cmd/sandpit-agent", []string{"internal/agent"}, "the small in-sandbox agent binary"},

	// Test support: nothing but tests and other test support imports it.
	{"internal/testenv", []string{".", "internal/driver/...", "internal/service", "internal/store", "internal/testenv/..."}, "test support"},
	{"internal/testenv/...", nil, "test support"},
	{"test/...", []string{".", "apitypes", "api/openapi", "client", "proto/...", "internal/filesig", "internal/driver/...", "internal/testenv/...", "test/harness", "internal/agentbin"}, "black-box test support"},
}

// The rules the issue names, checked through the whole graph so that a
// failure shows the chain of imports that breaks them.
var invariants = []struct {
	name  string
	from  []string // the packages the rule is about
	never []string // what they must not reach, directly or not
}{
	{
		"nothing below the surfaces imports them",
		[]string{".", "apitypes", "proto/...", "internal/agentapi", "internal/crashpoint", "internal/filesig", "internal/httpguard",
			"internal/store", "internal/driver/...", "internal/router/...", "internal/firewall", "internal/egress", "internal/metrics",
			"internal/cluster", "internal/idempotency", "internal/service", "internal/agent", "client",
			"internal/identity", "internal/volumes", "internal/templates"},
		[]string{"internal/api/...", "internal/gateway", "internal/daemon", "cmd/...", "internal/sshd"},
	},
	{
		"no aggregate beside the sandboxes imports the sandbox service",
		[]string{"internal/identity", "internal/volumes", "internal/templates"},
		[]string{"internal/service"},
	},
	{
		"the store imports neither the service nor the surfaces",
		[]string{"internal/store"},
		[]string{"internal/service", "internal/idempotency", "internal/api/...", "internal/gateway", "internal/daemon"},
	},
	{
		"the agent imports nothing of the daemon",
		[]string{"internal/agent", "internal/agentapi"},
		[]string{".", "apitypes", "client", "internal/store", "internal/service", "internal/idempotency", "internal/api/...",
			"internal/gateway", "internal/daemon", "internal/driver/...", "internal/router/...", "internal/cluster",
			"internal/metrics", "internal/firewall", "internal/egress", "internal/testenv/...", "cmd/..."},
	},
	{
		"the Go SDK imports nothing internal",
		[]string{"client", "apitypes"},
		[]string{"internal/...", "."},
	},
	{
		"no aggregate imports the sandbox service",
		[]string{"internal/templates", "internal/identity", "internal/volumes", "internal/events"},
		[]string{"internal/service"},
	},
	{
		"the gateway compiles neither the service nor the store",
		[]string{"internal/gateway"},
		[]string{"internal/service", "internal/store"},
	},
	{
		"the cluster speaks its own types, not the wire's",
		[]string{"internal/cluster"},
		[]string{"apitypes"},
	},
	{
		"production code imports no test support",
		[]string{".", "apitypes", "api/...", "client", "proto/...", "internal/...", "cmd/..."},
		[]string{"internal/testenv/...", "test/..."},
	},
}

// directRules are rules on a package's own imports, where a chain through
// another layer is allowed: the surfaces reach the runtime through the
// service, but name neither the runtime's nor the router's seam themselves.
var directRules = []struct {
	name  string
	from  []string // the packages the rule is about
	never []string // what they must not import themselves
}{
	{"the API surfaces import neither a runtime nor a router", []string{"internal/api/..."}, []string{"internal/driver/...", "internal/router/..."}},
}

// stdRules bound the standard library a layer may use. The domain decides;
// the HTTP surfaces carry: a domain package that imports net/http has an
// HTTP concern (a proxy, a page, a header) that belongs to the API layer.
// Packages that do not exist yet (the aggregates being carved out) match
// nothing.
var stdRules = []struct {
	name  string
	from  []string // module-relative packages
	never []string // standard library import paths; "p/..." is p and below
}{
	{"domain packages do not speak HTTP", []string{".", "internal/service", "internal/templates", "internal/identity", "internal/volumes", "internal/events"}, []string{"net/http/..."}},
}

// fileRules bound single files where the package they are in is too
// coarse: cmd/sandpit holds both the daemon's and the agent's subcommand.
var fileRules = []struct {
	file string   // relative to the module root
	may  []string // the module packages it may import
}{
	{"cmd/sandpit/agent.go", []string{"internal/agent"}},
}

func TestLayering(t *testing.T) {
	graph, std := importGraphs(t)
	for _, p := range sortedKeys(graph) {
		row, ok := placeOf(p)
		if !ok {
			t.Errorf("package %s has no place in the layering: add a row to layers in layering_test.go saying what it may import, and a line to the README's layout section", p)
			continue
		}
		for _, imp := range graph[p] {
			if !matchesAny(imp, layers[row].may) {
				t.Errorf("%s imports %s: %s (%s) may import only %s", p, imp, p, layers[row].what, listOr(layers[row].may))
			}
		}
	}
	for _, inv := range invariants {
		for _, p := range sortedKeys(graph) {
			if !matchesAny(p, inv.from) || matchesAny(p, inv.never) {
				continue // test support may import test support
			}
			if chain := reach(graph, p, inv.never); chain != nil {
				t.Errorf("%s: broken by the import chain %s", inv.name, strings.Join(chain, " -> "))
			}
		}
	}
	for _, dr := range directRules {
		for _, v := range directViolations(graph, dr.from, dr.never) {
			t.Errorf("%s: %s", dr.name, v)
		}
	}
	for _, sr := range stdRules {
		for _, v := range directViolations(std, sr.from, sr.never) {
			t.Errorf("%s: %s", sr.name, v)
		}
	}
	for _, fr := range fileRules {
		for _, imp := range fileImports(t, fr.file) {
			if !matchesAny(imp, fr.may) {
				t.Errorf("%s imports %s: that file may import only %s of the module", fr.file, imp, listOr(fr.may))
			}
		}
	}
}

// TestLayeringRules checks the checker on a made-up graph: a rule that
// cannot fail proves nothing.
func TestLayeringRules(t *testing.T) {
	for _, tc := range []struct {
		pkg, imp string
		ok       bool
	}{
		{"internal/service", "internal/store", true},
		{"internal/api/v1", "internal/service", true},
		{"internal/api/v1", "internal/api", true},
		{"internal/router/caddy", "internal/router/builtin", true},
		{"internal/gateway", "internal/api/e2b", false}, // the gateway reads route declarations only
		{"internal/store", "internal/service", false},
		{"internal/service", "internal/api", false},
		{"internal/api/daytona", "internal/store", false},
		{"internal/agent", "internal/service", false},
		{"internal/agent", ".", false},
		{"internal/cluster", "internal/gateway", false},
		{"internal/idempotency", "internal/service", false},
		{"internal/api/e2b", "internal/driver", false},
		{"internal/api/v1", "internal/router", false},
		{"internal/api/v1", "internal/api/agentrelay", true},
		{"internal/api/route", "internal/service", false},
		{"internal/api/route", "internal/api", false},
		{"internal/gateway", "internal/api/route", true},
		{"internal/gateway", "internal/api", false},
		{"internal/cluster", "apitypes", false},
	} {
		row, ok := placeOf(tc.pkg)
		if !ok {
			t.Errorf("%s has no place", tc.pkg)
			continue
		}
		if got := matchesAny(tc.imp, layers[row].may); got != tc.ok {
			t.Errorf("%s importing %s allowed = %v, want %v", tc.pkg, tc.imp, got, tc.ok)
		}
	}
	if _, ok := placeOf("internal/somethingnew"); ok {
		t.Error("an unknown package found a place; it must be reported instead")
	}
	graph := map[string][]string{
		"internal/agent":    {"internal/filesig"},
		"internal/filesig":  {"internal/service"},
		"internal/service":  {"internal/store"},
		"internal/store":    nil,
		"internal/agentapi": nil,
	}
	want := []string{"internal/agent", "internal/filesig", "internal/service"}
	if got := reach(graph, "internal/agent", []string{"internal/service", "internal/store"}); !slices.Equal(got, want) {
		t.Errorf("chain %v, want %v", got, want)
	}
	if got := reach(graph, "internal/agentapi", []string{"internal/service"}); got != nil {
		t.Errorf("chain %v from a package that imports nothing", got)
	}

	invariant := func(name string) []string {
		for _, inv := range invariants {
			if inv.name == name {
				return inv.never
			}
		}
		t.Fatalf("no invariant %q", name)
		return nil
	}
	carved := map[string][]string{
		"internal/templates": {"internal/events"},
		"internal/events":    {"internal/service"},
		"internal/service":   {"internal/store"},
		"internal/gateway":   {"internal/api/route", "internal/cluster"},
		"internal/api/route": {"."},
		"internal/cluster":   {".", "internal/httpguard"},
		"internal/httpguard": {"apitypes"},
	}
	if got, want := reach(carved, "internal/templates", invariant("no aggregate imports the sandbox service")), []string{"internal/templates", "internal/events", "internal/service"}; !slices.Equal(got, want) {
		t.Errorf("an aggregate reaching the service through another: chain %v, want %v", got, want)
	}
	if got := reach(carved, "internal/gateway", invariant("the gateway compiles neither the service nor the store")); got != nil {
		t.Errorf("the gateway over the route leaf reported: %v", got)
	}
	carved["internal/api/route"] = []string{"internal/service"}
	if got := reach(carved, "internal/gateway", invariant("the gateway compiles neither the service nor the store")); len(got) != 3 {
		t.Errorf("the gateway reaching the service through the route leaf: chain %v", got)
	}
	if got := reach(carved, "internal/cluster", invariant("the cluster speaks its own types, not the wire's")); len(got) != 3 {
		t.Errorf("the cluster reaching apitypes through a leaf: chain %v", got)
	}
	if !matchesAny("internal/driver/docker", directRules[0].never) || !matchesAny("internal/router", directRules[0].never) || matchesAny("internal/service", directRules[0].never) {
		t.Error("the surfaces' direct rule does not name the runtimes and routers alone")
	}
	std := map[string][]string{
		".":                  {"errors", "time"},
		"internal/service":   {"context", "net/http/httputil"},
		"internal/templates": {"net/http"},
		"internal/api":       {"net/http"},
		"internal/volumes":   {"net/netip"},
	}
	violations := directViolations(std, stdRules[0].from, stdRules[0].never)
	if want := []string{"internal/service imports net/http/httputil", "internal/templates imports net/http"}; !slices.Equal(violations, want) {
		t.Errorf("net/http violations %q, want %q", violations, want)
	}
}

// directViolations lists, for the packages of graph matching from, their
// own imports that match never, in order.
func directViolations(graph map[string][]string, from, never []string) []string {
	var out []string
	for _, p := range sortedKeys(graph) {
		if !matchesAny(p, from) {
			continue
		}
		for _, imp := range graph[p] {
			if matchesAny(imp, never) {
				out = append(out, p+" imports "+imp)
			}
		}
	}
	return out
}

// importGraphs lists every package of the module, in module-relative
// paths, with the module packages its own (non-test) files import and
// with the standard library packages they import.
func importGraphs(t *testing.T) (module, std map[string][]string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Error", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph, std := map[string][]string{}, map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		rel, ok := relative(p.ImportPath)
		if !ok {
			continue
		}
		var imps, stds []string
		for _, imp := range p.Imports {
			if r, ok := relative(imp); ok {
				imps = append(imps, r)
			} else if first, _, _ := strings.Cut(imp, "/"); !strings.Contains(first, ".") {
				stds = append(stds, imp) // the standard library's paths have no dot in their first element
			}
		}
		graph[rel], std[rel] = imps, stds
	}
	if len(graph) == 0 {
		t.Fatal("go list found no packages of the module")
	}
	return graph, std
}

// fileImports returns the module packages one file imports.
func fileImports(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var imps []string
	for _, s := range f.Imports {
		p, _ := strconv.Unquote(s.Path.Value)
		if r, ok := relative(p); ok {
			imps = append(imps, r)
		}
	}
	return imps
}

// relative turns a module import path into a module-relative one.
func relative(importPath string) (string, bool) {
	if importPath == module {
		return ".", true
	}
	rest, ok := strings.CutPrefix(importPath, module+"/")
	return rest, ok
}

// placeOf returns the index of the most specific row of layers matching p.
func placeOf(p string) (int, bool) {
	best, bestScore := -1, -1
	for i, row := range layers {
		if !matches(p, row.pkg) {
			continue
		}
		score := len(row.pkg)
		if !strings.HasSuffix(row.pkg, "/...") {
			score += 1 << 20 // an exact row beats any pattern
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return best, best >= 0
}

// matches reports whether the module-relative path p matches pattern.
func matches(p, pattern string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func matchesAny(p string, patterns []string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return matches(p, pat) })
}

// reach returns the shortest chain of imports from p to a package matching
// one of never, or nil when there is none.
func reach(graph map[string][]string, p string, never []string) []string {
	prev := map[string]string{p: ""}
	queue := []string{p}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, next := range graph[cur] {
			if _, seen := prev[next]; seen {
				continue
			}
			prev[next] = cur
			if matchesAny(next, never) {
				chain := []string{next}
				for at := cur; at != ""; at = prev[at] {
					chain = append(chain, at)
				}
				slices.Reverse(chain)
				return chain
			}
			queue = append(queue, next)
		}
	}
	return nil
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func listOr(patterns []string) string {
	if len(patterns) == 0 {
		return "nothing of the module"
	}
	return strings.Join(patterns, ", ")
}
