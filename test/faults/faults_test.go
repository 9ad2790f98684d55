// Package faults_test drives the service directly, with the real store and
// the real Docker runtime, and injects the failures the real things cannot be
// made to produce on demand: a runtime whose start fails, an agent that never
// becomes healthy. Each must leave no container and no row.
package faults_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/test/harness"
)

var agentBin string

func TestMain(m *testing.M) { os.Exit(harness.RunWithBinary(m, &agentBin)) }

// failingStart is the real runtime except that Start fails.
type failingStart struct{ driver.Driver }

var errInjected = errors.New("injected start failure")

func (f failingStart) Start(ctx context.Context, id string) error { return errInjected }

func TestCreateFailuresLeaveNothing(t *testing.T) {
	testenv.RequireDocker(t)
	image := testenv.TestImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := docker.New(ctx, docker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	notAnAgent := buildSilentAgent(t)
	cases := []struct {
		name    string
		rt      driver.Driver
		agent   string
		wantErr error
	}{
		{"runtime start fails", failingStart{rt}, agentBin, service.ErrRuntime},
		{"agent never healthy", rt, notAnAgent, service.ErrAgentUnhealthy},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.Open(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			labels := testenv.RunLabel(t)
			svc := service.New(service.Config{
				DefaultImage: image, AgentBinary: tc.agent, HealthTimeout: 3 * time.Second, ExtraLabels: labels,
			}, st, tc.rt, nil)
			_, err = svc.CreateSandbox(ctx, service.CreateRequest{Name: "doomed"})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("create error = %v, want %v", err, tc.wantErr)
			}
			left, err := rt.List(ctx, labels)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 0 {
				t.Fatalf("%d containers left behind", len(left))
			}
			rows, _, err := st.ListSandboxes(ctx, sandpit.ListOptions{})
			if err != nil || len(rows) != 0 {
				t.Fatalf("rows left behind: %v %v", rows, err)
			}
			// The name is free again: the failed create held nothing.
			if _, err := st.GetSandboxByName(ctx, "doomed"); !errors.Is(err, sandpit.ErrNotFound) {
				t.Fatalf("name still taken: %v", err)
			}
		})
	}
}

// buildSilentAgent builds a static binary that runs forever and serves
// nothing: an agent that never becomes healthy.
func buildSilentAgent(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nimport \"time\"\n\nfunc main() { time.Sleep(time.Hour) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module silent\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "silent")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build silent agent: %v\n%s", err, out)
	}
	return bin
}
