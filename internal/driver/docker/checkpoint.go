package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandpit-dev/sandpit/internal/driver"
)

// RestoreMarkerDir is where the daemon tells the runsc-ckpt runtime
// wrapper (scripts/runsc-ckpt) which checkpoint the next start of a
// container restores: a file named by the container's id holding the
// checkpoint's directory. The wrapper consumes the file at that start, so
// a later start boots the container as usual. /run is emptied by a host
// restart, and a marker is needed only between a resume's write and its
// start.
const RestoreMarkerDir = "/run/sandpit/runsc-restore"

// Checkpoints is the driver.Checkpointer of containers that run under a
// runsc runtime with gVisor's own network stack. The engine's own
// checkpoint API needs its experimental mode, which only a restart of the
// engine turns on, so the daemon drives runsc itself: Checkpoint runs the
// runtime's `checkpoint` on the container the engine made, and the restore
// goes through the engine's ordinary start, which the wrapper turns into a
// `runsc restore` when a marker names a checkpoint. The engine sees a
// container that exited and was started again.
type Checkpoints struct {
	d *Docker
	// path and args are the runtime's registration with the engine: the
	// wrapper, and the flags every runsc call needs (--platform).
	path string
	args []string
}

var _ driver.Checkpointer = (*Checkpoints)(nil)

// Checkpoints returns the checkpointer of the engine runtime name, or an
// error that says why its containers cannot be checkpointed: the runtime is
// not runsc, or runs with the host's network stack (runsc cannot save
// host-network sockets, "checkpoint not supported when using hostinet"),
// or its binary is not on this host (a remote engine).
func (d *Docker) Checkpoints(ctx context.Context, name string) (*Checkpoints, error) {
	info, err := d.cli.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("engine info: %w", err)
	}
	rt, ok := info.Runtimes[name]
	switch {
	case !ok:
		return nil, fmt.Errorf("runtime %s is not registered with the engine", name)
	case !strings.Contains(filepath.Base(rt.Path), "runsc"):
		return nil, fmt.Errorf("runtime %s (%s) is not gVisor's runsc; only runsc checkpoints without CRIU", name, rt.Path)
	case slices.Contains(rt.Args, "--network=host"):
		return nil, fmt.Errorf("runtime %s runs with --network=host, whose sockets runsc cannot checkpoint (register runsc-ckpt with scripts/ensure-runsc-checkpoint.sh)", name)
	}
	if _, err := os.Stat(rt.Path); err != nil {
		return nil, fmt.Errorf("runtime %s: its binary is not on this host: %w", name, err)
	}
	if err := os.MkdirAll(RestoreMarkerDir, 0o700); err != nil {
		return nil, fmt.Errorf("restore markers: %w", err)
	}
	return &Checkpoints{d: d, path: rt.Path, args: slices.Clone(rt.Args)}, nil
}

// Runtime is the path of the runtime the checkpoints go through.
func (c *Checkpoints) Runtime() string { return c.path }

// Checkpoint writes the container's processes into dir with `runsc
// checkpoint`, which ends the sandbox: the engine then sees the container
// exit. runsc keeps its state under the root the engine's shim gave it,
// which the sandbox process carries on its command line.
func (c *Checkpoints) Checkpoint(ctx context.Context, containerID, dir string) error {
	info, err := c.d.cli.ContainerInspect(ctx, containerID)
	if err != nil {
		return c.d.wrap("inspect", containerID, err)
	}
	if info.State == nil || !info.State.Running || info.State.Pid == 0 {
		return fmt.Errorf("checkpoint: container %s is not running", containerID)
	}
	root, err := runscRoot(info.State.Pid)
	if err != nil {
		return err
	}
	args := append(slices.Clone(c.args), "--root", root, "checkpoint", "--image-path", dir, info.ID)
	out, err := exec.CommandContext(ctx, c.path, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("runsc checkpoint of %s: %w: %s", containerID, err, firstLines(string(out), 3))
	}
	// runsc returns once the image is written, a moment before the shim
	// tells the engine the container exited; a start in that moment (a
	// resume right after the pause) would find it still running.
	wctx, cancel := context.WithTimeout(ctx, exitWait)
	defer cancel()
	waited, errs := c.d.cli.ContainerWait(wctx, info.ID, container.WaitConditionNotRunning)
	select {
	case <-waited:
		return nil
	case err := <-errs:
		return fmt.Errorf("checkpoint of %s: wait for the container to exit: %w", containerID, err)
	}
}

// exitWait bounds the wait for the engine to see a checkpointed container
// exit.
const exitWait = time.Minute

// RestoreAtNextStart writes (or, with dir "", removes) the container's
// restore marker. The marker goes in whole (a rename), so the wrapper never
// reads half a path.
func (c *Checkpoints) RestoreAtNextStart(containerID, dir string) error {
	info, err := c.d.cli.ContainerInspect(context.Background(), containerID)
	if err != nil {
		return c.d.wrap("inspect", containerID, err)
	}
	marker := filepath.Join(RestoreMarkerDir, info.ID)
	if dir == "" {
		if err := os.Remove(marker); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	tmp := marker + ".tmp"
	if err := os.WriteFile(tmp, []byte(dir+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, marker)
}

// runscRoot is the --root of the runsc sandbox process pid.
func runscRoot(pid int) (string, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return "", fmt.Errorf("runsc root: the sandbox process is not visible on this host: %w", err)
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--root="); ok {
			return v, nil
		}
		if a == "--root" && i+1 < len(args) {
			return args[i+1], nil
		}
	}
	return "", fmt.Errorf("runsc root: process %d (%s) names no --root", pid, firstLines(strings.Join(args, " "), 1))
}

// firstLines is at most n lines of s, trimmed.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	out := strings.Join(lines, " | ")
	if len(out) > 600 {
		out = out[:600] + "..."
	}
	return out
}
