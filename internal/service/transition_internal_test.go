package service

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// stateWriters are the store's methods that change a sandbox's state or
// remove it: every exported method of the store whose name says so, found in
// the store's source, so that a new one is covered without editing this test.
func stateWriters(t *testing.T) map[string]bool {
	t.Helper()
	writes := regexp.MustCompile(`State|^DeleteSandbox$`)
	reads := regexp.MustCompile(`^(Get|List|Count)`)
	out := map[string]bool{}
	for _, f := range parseDir(t, "../store") {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() {
				continue
			}
			if writes.MatchString(fn.Name.Name) && !reads.MatchString(fn.Name.Name) {
				out[fn.Name.Name] = true
			}
		}
	}
	if !out["SetSandboxState"] || !out["DeleteSandbox"] {
		t.Fatalf("state writers %v lack SetSandboxState or DeleteSandbox", out)
	}
	return out
}

func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		src, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, n, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// TestStateWritesOnlyInTransition: the service calls the store's state
// writers from transition alone (and markDeleting, the first half of a
// delete that transition ends), so no path can change a sandbox's state
// without publishing its event.
func TestStateWritesOnlyInTransition(t *testing.T) {
	writers := stateWriters(t)
	allowed := map[string]bool{"transition": true, "markDeleting": true}
	var bad []string
	calls := 0
	for _, f := range parseDir(t, ".") {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !writers[sel.Sel.Name] {
					return true
				}
				// Only calls on the store (s.store.X) count.
				if recv, ok := sel.X.(*ast.SelectorExpr); !ok || recv.Sel.Name != "store" {
					return true
				}
				calls++
				if !allowed[fn.Name.Name] {
					bad = append(bad, fn.Name.Name+" calls store."+sel.Sel.Name)
				}
				return true
			})
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("sandbox state written outside transition, without an event:\n%s", strings.Join(bad, "\n"))
	}
	if calls == 0 {
		t.Fatal("found no call of the store's state writers at all")
	}
}
