// Package sandpit_test holds the black-box tests of the whole daemon: the
// real binary, a real SQLite file, a real Docker engine and real HTTP.
package sandpit_test

import (
	"os"
	"testing"

	"github.com/sandpit-dev/sandpit/test/harness"
)

// sandpitBin is the daemon binary built once for the whole package.
var sandpitBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(holderEnv); spec != "" {
		// This process is a connection holder a flood test started.
		os.Exit(holdMain(spec))
	}
	os.Exit(harness.RunWithBinary(m, &sandpitBin))
}
