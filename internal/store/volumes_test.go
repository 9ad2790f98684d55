package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func newVolume(id, owner, name string) sandpit.Volume {
	return sandpit.Volume{ID: id, Owner: owner, Name: name, EngineName: "sandpit-vol-" + id}
}

func TestCreateVolumeOneNamePerOwnerConcurrently(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	var added atomic.Int32
	ids := make([]string, 32)
	parallel(32, func(i int) {
		v, outcome, err := s.CreateVolume(ctx, newVolume(fmt.Sprintf("vol%02d", i), "alice", "cache"), t0)
		if err != nil {
			t.Errorf("create %d: %v", i, err)
			return
		}
		if outcome == sandpit.Added {
			added.Add(1)
		}
		ids[i] = v.ID
	})
	if added.Load() != 1 {
		t.Fatalf("%d creates added a row, want 1", added.Load())
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("creates answered different volumes: %v", ids)
		}
	}
	// Another owner's volume of the same name is another row.
	if _, outcome, err := s.CreateVolume(ctx, newVolume("volbob", "bob", "cache"), t0); err != nil || outcome != sandpit.Added {
		t.Fatalf("bob's create: %v %v", outcome, err)
	}
}

func TestMountedVolumeIsNotDeleted(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	if _, _, err := s.CreateVolume(ctx, newVolume("vola", "alice", "data"), t0); err != nil {
		t.Fatal(err)
	}
	sb := sandpit.Sandbox{ID: "sb1", Owner: "alice", Image: "busybox", State: sandpit.StateCreating, CreatedAt: t0,
		Volumes: []sandpit.VolumeMount{{VolumeID: "vola", Path: "/data"}}}
	// Not ready yet: the mount (and so the sandbox row) is refused.
	if err := s.CreateSandbox(ctx, sb); !errors.Is(err, sandpit.ErrVolumeNotReady) {
		t.Fatalf("mounting a creating volume: %v", err)
	}
	if err := s.MarkVolumeReady(ctx, "vola", t0); err != nil {
		t.Fatal(err)
	}
	// Another owner cannot mount it.
	other := sb
	other.ID, other.Owner = "sb2", "bob"
	if err := s.CreateSandbox(ctx, other); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("another owner mounting: %v", err)
	}
	if _, err := s.GetSandbox(ctx, "sb2"); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("a refused mount left its sandbox row: %v", err)
	}
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	ms, err := s.SandboxMounts(ctx, "sb1")
	if err != nil || len(ms) != 1 || ms[0].VolumeName != "data" || ms[0].EngineName != "sandpit-vol-vola" {
		t.Fatalf("mounts: %+v %v", ms, err)
	}
	if err := s.MarkVolumeDeleting(ctx, "vola", t0); !errors.Is(err, sandpit.ErrVolumeInUse) {
		t.Fatalf("delete of a mounted volume: %v", err)
	}
	if err := s.DeleteVolumeRow(ctx, "vola"); !errors.Is(err, sandpit.ErrVolumeInUse) {
		t.Fatalf("row delete of a mounted volume: %v", err)
	}
	if err := s.DeleteSandbox(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkVolumeDeleting(ctx, "vola", t0); err != nil {
		t.Fatalf("delete after the sandbox went: %v", err)
	}
	// A deleting volume is mounted by nobody.
	sb.ID = "sb3"
	if err := s.CreateSandbox(ctx, sb); !errors.Is(err, sandpit.ErrVolumeNotReady) {
		t.Fatalf("mounting a deleting volume: %v", err)
	}
	if err := s.DeleteVolumeRow(ctx, "vola"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetVolume(ctx, "vola"); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}
