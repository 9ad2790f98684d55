package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNothingOfTheDaemon: what makes the agent small is what it does
// not link. The layering test bounds the module's own imports; this bounds
// the third-party ones, which could come in through internal/agent's.
func TestLinksNothingOfTheDaemon(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, daemonOnly := range []string{
			"github.com/docker/", "modernc.org/sqlite", "github.com/hashicorp/", "github.com/prometheus/",
			"github.com/spf13/cobra", "github.com/getkin/", "github.com/caddyserver/",
			"github.com/sandpit-dev/sandpit/internal/daemon", "github.com/sandpit-dev/sandpit/internal/service",
		} {
			if strings.HasPrefix(pkg, daemonOnly) {
				t.Errorf("the agent links %s", pkg)
			}
		}
	}
}
