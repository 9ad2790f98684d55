package sandpit_test

import (
	"context"
	"os/exec"
	"testing"
)

func run(ctx context.Context, t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}
