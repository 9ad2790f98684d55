// Package sandpit_test holds the black-box tests of the whole daemon: the
// real binary, a real SQLite file, a real Docker engine and real HTTP.
package sandpit_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// sandpitBin is the daemon binary built once for the whole package.
var sandpitBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandpit-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sandpitBin, err = harness.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
