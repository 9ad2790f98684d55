package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sandpit-dev/sandpit"
)

func TestEnsureTemplateOneNamePerOwnerConcurrently(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	var added atomic.Int32
	ids := make([]string, 32)
	errs := make([]error, 32)
	parallel(32, func(i int) {
		got, outcome, err := s.EnsureTemplate(ctx, sandpit.Template{ID: fmt.Sprintf("tp-%02d", i), Owner: "alice", Name: "py"}, t0)
		if err != nil {
			errs[i] = err
			return
		}
		if outcome == sandpit.Added {
			added.Add(1)
		}
		ids[i] = got.ID
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ensure %d: %v", i, err)
		}
	}
	if added.Load() != 1 {
		t.Fatalf("%d inserts, want 1", added.Load())
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("callers got templates %s and %s for one name", ids[0], id)
		}
	}
	// Another owner's name is its own, and anonymous templates never clash.
	for i, tp := range []sandpit.Template{
		{ID: "bob-py", Owner: "bob", Name: "py"},
		{ID: "anon-1", Owner: "alice"},
		{ID: "anon-2", Owner: "alice"},
	} {
		if _, outcome, err := s.EnsureTemplate(ctx, tp, t0); err != nil || outcome != sandpit.Added {
			t.Fatalf("case %d: outcome %v err %v, want Added", i, outcome, err)
		}
	}
}

func TestOneRunningBuildPerTemplate(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	if _, _, err := s.EnsureTemplate(ctx, sandpit.Template{ID: "tp", Owner: "alice", Name: "py"}, t0); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if err := s.CreateBuild(ctx, sandpit.TemplateBuild{ID: fmt.Sprintf("b-%02d", i), TemplateID: "tp"}, t0); err != nil {
			t.Fatal(err)
		}
	}
	var started, conflicts atomic.Int32
	errs := make([]error, 16)
	parallel(16, func(i int) {
		err := s.StartBuild(ctx, sandpit.TemplateBuild{ID: fmt.Sprintf("b-%02d", i), ContentHash: fmt.Sprint(i)}, t0)
		switch {
		case err == nil:
			started.Add(1)
		case errors.Is(err, sandpit.ErrBuildConflict):
			conflicts.Add(1)
		default:
			errs[i] = err
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if started.Load() != 1 || conflicts.Load() != 15 {
		t.Fatalf("%d started and %d conflicts, want 1 and 15", started.Load(), conflicts.Load())
	}
	running, err := s.ListUnfinishedBuilds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var runID string
	for _, b := range running {
		if b.State == sandpit.BuildBuilding {
			runID = b.ID
		}
	}
	// A ready build hands its image to the template; a second end is ignored.
	if err := s.FinishBuild(ctx, runID, sandpit.BuildReady, "img:1", "", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishBuild(ctx, runID, sandpit.BuildError, "", "late", t0); err != nil {
		t.Fatal(err)
	}
	tp, err := s.GetTemplate(ctx, "tp")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.GetBuild(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if tp.Image != "img:1" || b.State != sandpit.BuildReady {
		t.Fatalf("template image %q, build %s, want img:1 and ready", tp.Image, b.State)
	}
	// With the first build ended, the next one may run.
	if err := s.StartBuild(ctx, sandpit.TemplateBuild{ID: "b-15"}, t0); err != nil && runID != "b-15" {
		t.Fatalf("start after the running one ended: %v", err)
	}
	// A ready build without an image is not representable.
	if err := s.FinishBuild(ctx, "b-14", sandpit.BuildReady, "", "", t0); err == nil && runID != "b-14" {
		t.Fatal("a ready build without an image was recorded")
	}
}
