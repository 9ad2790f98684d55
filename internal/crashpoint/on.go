//go:build sandpit_crashpoints

package crashpoint

import (
	"log/slog"
	"os"
	"syscall"
)

// Enabled reports whether this binary has crash points.
const Enabled = true

// Hit kills the process with SIGKILL when point is the one Env names: no
// deferred cleanup, no graceful shutdown, exactly what a machine losing the
// process looks like.
func Hit(point string) {
	if os.Getenv(Env) != point {
		return
	}
	slog.Warn("crash point reached, killing the process", "point", point)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; never return into the operation
}
