package api_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// keyedDecl finds the keyed route declarations of a surface's source:
// keyed("METHOD /path", ...), as Routes.HandleKeyed is called.
var keyedDecl = regexp.MustCompile(`keyed\("((?:GET|POST|PUT|DELETE|PATCH) [^"]*)"`)

// TestKeyedRoutesDocumented: docs/idempotency.md's table of keyed routes is
// exactly the keyed routes the three wires declare, so a route cannot take a
// key undocumented, nor the document promise one a route ignores.
func TestKeyedRoutesDocumented(t *testing.T) {
	declared := map[string]bool{}
	for surface, mount := range map[string]string{"v1": "", "e2b": "/e2b", "daytona": "/daytona"} {
		files, err := filepath.Glob(filepath.Join(surface, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range keyedDecl.FindAllStringSubmatch(string(src), -1) {
				method, path, _ := strings.Cut(m[1], " ")
				declared[method+" "+mount+path] = true
			}
		}
	}
	if len(declared) < 30 {
		t.Fatalf("found only %d keyed routes: has the registration style changed?", len(declared))
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "idempotency.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok1 := strings.Cut(string(doc), "<!-- keyed-routes:begin -->")
	table, _, ok2 := strings.Cut(rest, "<!-- keyed-routes:end -->")
	if !ok1 || !ok2 {
		t.Fatal("docs/idempotency.md has no keyed-routes table")
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| [^|]+ \\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1) {
		documented[m[1]] = true
	}
	var missing, extra []string
	for r := range declared {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		if !declared[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	for _, r := range missing {
		t.Errorf("%s is keyed but not in docs/idempotency.md's table", r)
	}
	for _, r := range extra {
		t.Errorf("docs/idempotency.md lists %s, which no wire declares keyed", r)
	}
}
