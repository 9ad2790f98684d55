package docker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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
func makeBuildCgroup(pids int64) (string, func(), error) {
	// Random per build, not derived from the tag: a build tried again under
	// the same tag must not share a parent whose removal the first try
	// is still retrying. The daemon's pid is in the name, so that a later
	// daemon can tell the parents of a daemon that died mid-build
	// (sweepBuildCgroups) from those of one still building.
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	name := buildCgroupPrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(nonce[:])
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
		// too (v1), and removes its step containers' cgroups below it a
		// moment after the build answers, so a parent is often not empty
		// yet when the build ends: the removal is retried in the
		// background until every copy is gone or cleanupPatience passes.
		// A parent still holding a step then (an engine that never removed
		// it) stays; it costs nothing but its name.
		if removeBuildCgroup(name) {
			return
		}
		go func() {
			deadline := time.Now().Add(cleanupPatience)
			for delay := 100 * time.Millisecond; time.Now().Before(deadline); delay = min(2*delay, 5*time.Second) {
				time.Sleep(delay)
				if removeBuildCgroup(name) {
					return
				}
			}
		}()
	}
	return "/" + name, cleanup, nil
}

// buildCgroupPrefix starts the name of every build's cgroup parent.
const buildCgroupPrefix = "sandpit-build-"

// sweepBuildCgroups removes the cgroup parents that builds of daemons no
// longer running left behind: a daemon killed mid-build never runs its
// cleanup. A parent names its daemon's pid; one whose daemon is alive (this
// one, or another daemon on the host) is left alone, since between two of
// its steps it is empty but still wanted. Parents named before the pid was
// part of the name are removed when empty. It returns how many it removed.
func sweepBuildCgroups() (removed int) {
	seen := map[string]bool{}
	dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", buildCgroupPrefix+"*"))
	more, _ := filepath.Glob(filepath.Join(cgroupRoot, buildCgroupPrefix+"*"))
	for _, dir := range append(dirs, more...) {
		name := filepath.Base(dir)
		if seen[name] {
			continue
		}
		seen[name] = true
		pidText, _, hasPID := strings.Cut(strings.TrimPrefix(name, buildCgroupPrefix), "-")
		if pid, err := strconv.Atoi(pidText); hasPID && err == nil && processAlive(pid) {
			continue
		}
		if removeBuildCgroup(name) {
			removed++
		}
	}
	return removed
}

// processAlive reports whether a process with the pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// cleanupPatience bounds how long a build's cgroup parent is waited for to
// empty after the build ends.
const cleanupPatience = 2 * time.Minute

// removeBuildCgroup removes every copy of a build's cgroup parent, children
// (empty cgroups the engine left) first, and reports whether none is left.
func removeBuildCgroup(name string) bool {
	matches, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", name))
	matches = append(matches, filepath.Join(cgroupRoot, name))
	left := false
	for _, m := range matches {
		if _, err := os.Stat(m); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		// Deepest first: a cgroup is removed with rmdir, which refuses
		// one that has children.
		var dirs []string
		_ = filepath.WalkDir(m, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
		if _, err := os.Stat(m); !errors.Is(err, fs.ErrNotExist) {
			left = true
		}
	}
	return !left
}
