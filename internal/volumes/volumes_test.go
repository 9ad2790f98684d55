package volumes_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/volumes"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func as(owner string) context.Context {
	return sandpit.WithPrincipal(context.Background(), sandpit.Principal{TokenName: owner, Owner: owner, Scopes: []string{sandpit.ScopeSandboxesWrite}})
}

// Without an engine's volumes, bad input is still refused as invalid, and
// a valid create or mount is refused as unavailable; nothing is written.
func TestNoEngine(t *testing.T) {
	st := openStore(t)
	v := volumes.New(volumes.Config{Store: st, Log: slog.New(slog.DiscardHandler), SizeMB: 64})
	ctx := as("ann")
	for _, tc := range []struct {
		name   string
		vol    string
		sizeMB int64
		want   error
	}{
		{"bad name", "-x", 0, sandpit.ErrInvalid},
		{"too small", "data", 1, sandpit.ErrInvalid},
		{"too big", "data", 65, sandpit.ErrInvalid},
		{"no engine", "data", 0, volumes.ErrVolumesUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := v.CreateVolume(ctx, tc.vol, tc.sizeMB); !errors.Is(err, tc.want) {
				t.Fatalf("create: %v, want %v", err, tc.want)
			}
		})
	}
	if vs, err := v.ListVolumes(ctx); err != nil || len(vs) != 0 {
		t.Fatalf("volumes after refusals: %v %v", vs, err)
	}
	if _, err := v.ResolveMounts(ctx, []volumes.MountRequest{{Volume: "data", Path: "/data"}}); !errors.Is(err, volumes.ErrVolumesUnavailable) {
		t.Fatalf("mount: %v, want unavailable", err)
	}
	if ms, err := v.ResolveMounts(ctx, nil); err != nil || ms != nil {
		t.Fatalf("no mounts: %v %v", ms, err)
	}
}

// On the real engine: a create is idempotent by name, another size is a
// conflict, mounts resolve only the caller's ready volumes at valid paths,
// and a delete removes the engine volume and the row.
func TestEngineVolumes(t *testing.T) {
	testenv.TestImage(t) // skips (or fails in CI) without an engine
	run := testenv.RunLabel(t)
	ctx := context.Background()
	d, err := docker.New(ctx, docker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	st := openStore(t)
	v := volumes.New(volumes.Config{Store: st, Engine: d, Log: slog.New(slog.DiscardHandler), SizeMB: 64, ExtraLabels: run})
	ann, bob := as("ann"), as("bob")

	a, outcome, err := v.CreateVolume(ann, "data", 0)
	if err != nil || outcome != sandpit.Added || a.State != sandpit.VolumeReady || a.SizeMB != 64 {
		t.Fatalf("create: %+v %v %v", a, outcome, err)
	}
	again, outcome, err := v.CreateVolume(ann, "data", 0)
	if err != nil || outcome != sandpit.AlreadyBound || again.ID != a.ID {
		t.Fatalf("retry: %+v %v %v, want the same volume", again, outcome, err)
	}
	if _, _, err := v.CreateVolume(ann, "data", 32); !errors.Is(err, sandpit.ErrNameConflict) {
		t.Fatalf("other size: %v, want a name conflict", err)
	}
	eng, err := d.ListVolumes(ctx, run)
	if err != nil || len(eng) != 1 || eng[0].Name != a.EngineName {
		t.Fatalf("engine volumes: %+v %v, want one (%s)", eng, err, a.EngineName)
	}

	ms, err := v.ResolveMounts(ann, []volumes.MountRequest{{Volume: "data", Path: "/data", ReadOnly: true}})
	if err != nil || len(ms) != 1 || ms[0].VolumeID != a.ID || ms[0].EngineName != a.EngineName || !ms[0].ReadOnly {
		t.Fatalf("resolve: %+v %v", ms, err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		reqs []volumes.MountRequest
		want error
	}{
		{"another owner's by name", bob, []volumes.MountRequest{{Volume: "data", Path: "/data"}}, sandpit.ErrNotFound},
		{"another owner's by id", bob, []volumes.MountRequest{{Volume: a.ID, Path: "/data"}}, sandpit.ErrNotFound},
		{"relative path", ann, []volumes.MountRequest{{Volume: "data", Path: "data"}}, sandpit.ErrInvalid},
		{"reserved path", ann, []volumes.MountRequest{{Volume: "data", Path: "/proc/x"}}, sandpit.ErrInvalid},
		{"path twice", ann, []volumes.MountRequest{{Volume: "data", Path: "/a"}, {Volume: "data", Path: "/a"}}, sandpit.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := v.ResolveMounts(tc.ctx, tc.reqs); !errors.Is(err, tc.want) {
				t.Fatalf("resolve: %v, want %v", err, tc.want)
			}
		})
	}

	if err := v.DeleteVolume(bob, a.ID); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("another owner's delete: %v, want not found", err)
	}
	if err := v.DeleteVolume(ann, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.GetVolume(ann, a.ID); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("deleted volume: %v", err)
	}
	if eng, err := d.ListVolumes(ctx, run); err != nil || len(eng) != 0 {
		t.Fatalf("engine volumes after delete: %+v %v", eng, err)
	}
}
