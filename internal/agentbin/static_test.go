package agentbin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestCheckStatic: a program built with cgo (what a plain go build does on
// a machine with gcc, through the net package) is found dynamic, the same
// program built with CGO_ENABLED=0 static.
func TestCheckStatic(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		if testenv.InCI() {
			t.Fatal("no gcc: .ci/run installs it")
		}
		t.Skip("no gcc: cgo builds are not possible here")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	prog := "package main\n\nimport \"net\"\n\nfunc main() { _, _ = net.LookupHost(\"localhost\") }\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cgo     string
		dynamic bool
	}{{"1", true}, {"0", false}} {
		out := filepath.Join(dir, "prog-cgo"+tc.cgo)
		cmd := exec.Command("go", "build", "-o", out, src)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+tc.cgo, "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build with CGO_ENABLED=%s: %v\n%s", tc.cgo, err, b)
		}
		err := CheckStatic(out)
		if got := errors.Is(err, ErrDynamic); got != tc.dynamic {
			t.Errorf("CGO_ENABLED=%s: CheckStatic = %v, want dynamic %v", tc.cgo, err, tc.dynamic)
		}
	}
	if err := CheckStatic(src); err == nil || errors.Is(err, ErrDynamic) {
		t.Errorf("CheckStatic of a source file = %v, want a read error", err)
	}
}
