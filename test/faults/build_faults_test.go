package faults_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// vanishingBuilds is the real engine's image side, except that its first
// `fail` builds end as the engine ends a build whose cached image another
// build's cleanup removed mid-build. That race is real (the classic builder
// reuses untagged images that removing any template's image prunes), but
// its window is a few milliseconds between two engine steps, so a test
// cannot make it happen on demand.
type vanishingBuilds struct {
	*docker.Docker
	fail  int32
	calls atomic.Int32
}

func (v *vanishingBuilds) Build(ctx context.Context, spec driver.BuildSpec, logs io.Writer) (string, error) {
	if v.calls.Add(1) <= v.fail {
		// The engine read the whole context before it failed.
		_, _ = io.Copy(io.Discard, spec.Context)
		return "", fmt.Errorf("%w: unable to find image \"sha256:%s\" (%w)", driver.ErrBuildFailed, strings.Repeat("ab", 32), driver.ErrBuildImageVanished)
	}
	return v.Docker.Build(ctx, spec, logs)
}

// TestBuildRetriesVanishedCacheImage: a template build that loses an image
// the engine was reusing runs again and ends ready, with one image; one
// that keeps losing it gives up after three runs with the engine's reason;
// a build that fails for any other reason is not run again.
func TestBuildRetriesVanishedCacheImage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	cases := []struct {
		name       string
		fail       int32
		dockerfile string
		wantState  sandpit.BuildState
		wantCalls  int32
		wantError  string
	}{
		{"lost once, built again", 1, "FROM " + f.image + "\nRUN echo once > /built\n", sandpit.BuildReady, 2, ""},
		{"lost every time", 5, "FROM " + f.image + "\nRUN echo always > /built\n", sandpit.BuildError, 3, `unable to find image "sha256:`},
		{"a failing step", 0, "FROM " + f.image + "\nRUN exit 7\n", sandpit.BuildError, 1, "returned a non-zero code: 7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			images := &vanishingBuilds{Docker: f.rt, fail: tc.fail}
			svc := service.New(service.Config{
				DefaultImage: f.image, AgentBinary: agentBin, HealthTimeout: 10 * time.Second,
				ExtraLabels: f.labels, Instance: f.labels[driver.LabelRun],
				Images: images,
			}, f.st, f.rt, f.rtr)
			tpls := templates.New(templates.Config{
				ExtraLabels: f.labels, Instance: f.labels[driver.LabelRun],
				Images: images, TemplateDir: t.TempDir(),
			}, f.st, svc.Idempotency(), svc.Events(), svc)
			svc.UseTemplates(tpls)
			if err := tpls.RecoverBuilds(ctx); err != nil {
				t.Fatal(err)
			}
			tpl, _, err := tpls.EnsureTemplate(ctx, templates.Spec{Name: "vanish-" + fmt.Sprint(tc.fail)})
			if err != nil {
				t.Fatal(err)
			}
			b, err := tpls.NewBuild(ctx, tpl.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tpls.StartBuild(ctx, b.ID, templates.BuildDefinition{Dockerfile: tc.dockerfile, Source: tc.dockerfile}); err != nil {
				t.Fatal(err)
			}
			for !b.State.Done() {
				select {
				case <-ctx.Done():
					t.Fatalf("build still %s", b.State)
				case <-time.After(100 * time.Millisecond):
				}
				if b, err = tpls.Build(ctx, b.ID); err != nil {
					t.Fatal(err)
				}
			}
			if b.Image != "" {
				t.Cleanup(func() { _ = f.rt.RemoveImage(context.Background(), b.Image) })
			}
			if b.State != tc.wantState || !strings.Contains(b.Error, tc.wantError) {
				t.Errorf("build ended %s (%q), want %s with %q", b.State, b.Error, tc.wantState, tc.wantError)
			}
			if got := images.calls.Load(); got != tc.wantCalls {
				t.Errorf("engine builds: %d, want %d", got, tc.wantCalls)
			}
			if tc.wantState == sandpit.BuildReady {
				if ok, err := f.rt.HasImage(ctx, b.Image); err != nil || !ok {
					t.Errorf("the ready build's image %s: present %v, %v", b.Image, ok, err)
				}
			}
		})
	}
}
