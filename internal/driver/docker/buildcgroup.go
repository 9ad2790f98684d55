package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// cpuPeriod is the CFS period of a build step's CPU quota, in microseconds
// (the kernel's default).
const cpuPeriod = 100000

// cgroupRoot is where the host mounts its cgroups. The engine runs on the
// daemon's host (it talks to a local socket), so the two share them.
const cgroupRoot = "/sys/fs/cgroup"

// makeBuildCgroup makes the cgroup parent of one build's step containers
// with pids.max set, so that all its steps together run at most pids
// processes, and returns the parent's name for the engine (relative to the
// cgroup root, which is what the engine's cgroupfs driver takes) and a
// cleanup that removes it once the steps are gone. Both cgroup v1 (a pids
// hierarchy of its own) and v2 (one unified hierarchy) are handled.
func makeBuildCgroup(tag string, pids int64) (string, func(), error) {
	sum := sha256.Sum256([]byte(tag + "\x00" + strconv.Itoa(os.Getpid())))
	name := "sandpit-build-" + hex.EncodeToString(sum[:6])
	dir := filepath.Join(cgroupRoot, "pids", name) // v1
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		dir = filepath.Join(cgroupRoot, name) // v2
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("make the build's cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(pids, 10)), 0o644); err != nil {
		_ = os.Remove(dir)
		return "", nil, fmt.Errorf("limit the build's processes (%s): %w", dir, err)
	}
	cleanup := func() {
		// The engine's runtime made the parent in every other hierarchy
		// too (v1); each is empty once the steps' containers are removed.
		matches, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", name))
		matches = append(matches, filepath.Join(cgroupRoot, name))
		for _, m := range matches {
			// A parent still holding a step (an engine that has not
			// removed it yet) stays; it costs nothing but its name.
			_ = os.Remove(m)
		}
	}
	return "/" + name, cleanup, nil
}
