// Package testenv helps tests that need a real Docker engine: it skips them
// when no engine answers (and fails them instead in CI), builds the local test
// image once per test process, and labels and cleans up what a test creates.
//
// It is an ordinary (non-test) package so that every package's tests can use
// it; nothing outside tests should import it.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs" // same checks as containerd/errdefs, which go.mod only has as indirect

	"github.com/sandpit-dev/sandpit/internal/driver"
)

// DefaultTestImage is the image scripts/build-test-image.sh builds; the
// SANDPIT_TEST_IMAGE environment variable overrides it (for the script too).
const DefaultTestImage = "sandpit/base:test"

// InCI reports whether the CI environment variable is "true". There a
// missing engine is a failure, not a reason to skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// newClient connects to the engine the environment names.
func newClient() (*client.Client, error) {
	return client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
}

// RequireDocker skips the test unless a Docker engine answers; with CI=true
// it fails the test instead.
func RequireDocker(t testing.TB) {
	t.Helper()
	if err := ping(); err != nil {
		if InCI() {
			t.Fatalf("docker engine required in CI: %v", err)
		}
		t.Skipf("no docker engine: %v", err)
	}
}

func ping() error {
	cli, err := newClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cli.Ping(ctx)
	return err
}

// buildImage runs scripts/build-test-image.sh at most once per process and
// remembers the outcome. It is the package's only mutable state: a test
// binary runs many tests (often in parallel) and each asks for the image, so
// the result must be shared between them, and there is no other place to keep
// it without making every package write a TestMain.
var buildImage = sync.OnceValues(func() ([]byte, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "scripts", "build-test-image.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w", script, err)
	}
	return out.Bytes(), nil
})

// TestImage makes sure the test image exists (building it the first time a
// process asks) and returns its reference. It implies RequireDocker.
func TestImage(t testing.TB) string {
	t.Helper()
	RequireDocker(t)
	if out, err := buildImage(); err != nil {
		t.Fatalf("build test image: %v\n%s", err, out)
	}
	if img := os.Getenv("SANDPIT_TEST_IMAGE"); img != "" {
		return img
	}
	return DefaultTestImage
}

// ModuleRoot returns the directory holding the module's go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// moduleRoot walks up from the working directory (a test runs in its
// package's directory) to the go.mod of this module.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isThisModule(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: go.mod of github.com/sandpit-dev/sandpit not found above the working directory")
		}
		dir = parent
	}
}

func isThisModule(gomod []byte) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == "github.com/sandpit-dev/sandpit"
		}
	}
	return false
}

// RunLabel returns a label {sandpit.run: <random>} unique to this call. Put
// it on everything the test creates; the returned label's containers are
// force-removed when the test ends (CleanupRun, registered here, runs after
// every cleanup the test registers later).
func RunLabel(t testing.TB) map[string]string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	value := hex.EncodeToString(b[:])
	t.Cleanup(func() { CleanupRun(t, value) })
	return map[string]string{driver.LabelRun: value}
}

// CleanupRun force-removes every container (running or not) labelled with
// label: either a sandpit.run value, or a whole "key=value" label. Failures
// fail the test, since they leak containers.
func CleanupRun(t testing.TB, label string) {
	t.Helper()
	if label == "" {
		t.Error("testenv.CleanupRun: empty label")
		return
	}
	filter := label
	if !strings.Contains(label, "=") {
		filter = driver.LabelRun + "=" + label
	}
	cli, err := newClient()
	if err != nil {
		t.Errorf("cleanup %s: %v", filter, err)
		return
	}
	defer cli.Close()
	// Not t.Context(): it is already cancelled when cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", filter))})
	if err != nil {
		if ping() != nil && !InCI() {
			return // no engine, so nothing was created
		}
		t.Errorf("cleanup %s: list: %v", filter, err)
		return
	}
	for _, c := range list {
		err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !errdefs.IsNotFound(err) && !strings.Contains(err.Error(), "already in progress") {
			t.Errorf("cleanup %s: remove %.12s: %v", filter, c.ID, err)
		}
	}
	// Volumes go after the containers that mounted them.
	vols, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", filter))})
	if err != nil {
		t.Errorf("cleanup %s: list volumes: %v", filter, err)
		return
	}
	for _, v := range vols.Volumes {
		if err := cli.VolumeRemove(ctx, v.Name, true); err != nil && !errdefs.IsNotFound(err) {
			t.Errorf("cleanup %s: remove volume %s: %v", filter, v.Name, err)
		}
	}
}
