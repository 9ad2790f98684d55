package service_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/firewall"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// failingIptables stands in for iptables when a test needs it to fail, which
// the real one will not do on demand: listing answers with empty chains,
// and every transaction fails while failing is set.
type failingIptables struct{ failing atomic.Bool }

var errIptables = errors.New("injected iptables failure")

func (f *failingIptables) run(_ context.Context, _ []byte, name string, args ...string) ([]byte, error) {
	if strings.HasSuffix(name, "-restore") && f.failing.Load() {
		return nil, errIptables
	}
	return nil, nil
}

// A sandbox whose rules cannot be installed does not run: the create fails
// and leaves neither a container nor a row, and a start stops the container
// again instead of leaving it unconfined.
func TestFirewallFailureLeavesNoUnconfinedSandbox(t *testing.T) {
	image := testenv.TestImage(t)
	labels := testenv.RunLabel(t)
	bin := buildSandpit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt, err := docker.New(ctx, docker.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	ipt := &failingIptables{}
	fw, err := firewall.NewWithRunner(firewall.Config{Network: "bridge", Bridge: "docker0", Logger: log}, ipt.run)
	if err != nil {
		t.Fatal(err)
	}
	var inst [8]byte
	_, _ = rand.Read(inst[:])
	svc := service.New(service.Config{
		DefaultImage: image, AgentBinary: bin, ExtraLabels: labels,
		Instance: hex.EncodeToString(inst[:]), Firewall: fw, Logger: log,
	}, st, rt, nil)
	none := sandpit.NetworkPolicy{Egress: sandpit.EgressNone}

	ipt.failing.Store(true)
	_, err = svc.CreateSandbox(ctx, service.CreateRequest{ID: "sbfwfail" + hex.EncodeToString(inst[:3]), Network: none})
	if !errors.Is(err, service.ErrRuntime) {
		t.Fatalf("create with failing iptables: %v, want ErrRuntime", err)
	}
	if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sandpit.sandbox-id=sbfwfail"+hex.EncodeToString(inst[:3])).Output(); len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("container left behind: %s", out)
	}
	if list, _, err := st.ListSandboxes(ctx, sandpit.ListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("rows left behind: %v %v", list, err)
	}

	ipt.failing.Store(false)
	sb, err := svc.CreateSandbox(ctx, service.CreateRequest{Network: none})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	ipt.failing.Store(true)
	if _, err := svc.StartSandbox(ctx, sb.ID); !errors.Is(err, service.ErrRuntime) {
		t.Fatalf("start with failing iptables: %v, want ErrRuntime", err)
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", "sandpit-"+sb.ID).Output()
	if err != nil || strings.TrimSpace(string(out)) != "false" {
		t.Errorf("container running = %q %v after a failed firewall, want false", out, err)
	}
	ipt.failing.Store(false)
	if err := svc.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}
