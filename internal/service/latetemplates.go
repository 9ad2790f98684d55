package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/distribution/reference"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/driver"
)

// lateTemplates are the daemon's templates whose image was not built when it
// started (the code interpreter's, 1.7 GB, takes minutes to build): the
// daemon serves at once, and each becomes available as soon as the engine
// has its image, without a restart.
type lateTemplates struct {
	mu      sync.Mutex
	pending map[string]string // template name -> image awaited
	ready   map[string]string // template name -> image, once the engine has it
	// buildDir is where the build scripts record their progress; empty
	// when the daemon looks for none.
	buildDir string
	// engine says whether an image exists; nil without an
	// engine (unit tests), when no late template ever becomes ready.
	engine driver.Images
	log    *slog.Logger
}

func newLateTemplates(pending map[string]string, buildDir string, images driver.Images, log *slog.Logger) *lateTemplates {
	return &lateTemplates{pending: maps.Clone(pending), ready: map[string]string{}, buildDir: buildDir, engine: images, log: log}
}

// image is the image of a late template that is ready.
func (l *lateTemplates) image(name string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	img, ok := l.ready[name]
	return img, ok
}

// awaited is the image of name when it is a late template whose image is
// not built.
func (l *lateTemplates) awaited(name string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	img, ok := l.pending[name]
	return img, ok
}

// markReady makes the late template name, awaiting img, available.
func (l *lateTemplates) markReady(name, img string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[name]; !ok {
		return false
	}
	delete(l.pending, name)
	l.ready[name] = img
	return true
}

// images are the images of the late templates that are ready.
func (l *lateTemplates) images() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.ready))
	for _, img := range l.ready {
		out = append(out, img)
	}
	return out
}

// build reports whether img is being built and where its build is, from
// the progress file the build scripts keep for its repository
// (scripts/lib/image-build.sh: "PID<tab>TEXT"). A file whose process has
// gone is an ended build's (killed before it could remove it).
func (l *lateTemplates) build(img string) (progress string, building bool) {
	if l.buildDir == "" {
		return "", false
	}
	named, err := reference.ParseNormalizedNamed(img)
	if err != nil {
		return "", false
	}
	repo := strings.NewReplacer("/", "_", ":", "_").Replace(reference.FamiliarName(named))
	b, err := os.ReadFile(filepath.Join(l.buildDir, repo+".progress"))
	if err != nil {
		return "", false
	}
	pidText, text, _ := strings.Cut(strings.TrimSpace(string(b)), "\t")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return "", false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return "", false
	}
	return text, true
}

// AwaitedTemplate is a late template whose image is not built yet.
type AwaitedTemplate struct {
	Image string
	// Building says that a build of the image runs; Progress is where it
	// is ("step 3/7: RUN ...").
	Building bool
	Progress string
}

// AwaitedTemplates are the late templates whose image is not built yet, by
// name, for the daemon's status.
func (s *Service) AwaitedTemplates() map[string]AwaitedTemplate {
	s.late.mu.Lock()
	pending := maps.Clone(s.late.pending)
	s.late.mu.Unlock()
	out := make(map[string]AwaitedTemplate, len(pending))
	for name, img := range pending {
		progress, building := s.late.build(img)
		out[name] = AwaitedTemplate{Image: img, Building: building, Progress: progress}
	}
	return out
}

// imageReady asks the engine whether a late template's image exists,
// and makes the template available when it does.
func (l *lateTemplates) imageReady(ctx context.Context, name, img string) bool {
	ok, err := l.engine.HasImage(ctx, img)
	if err != nil || !ok {
		return false
	}
	if l.markReady(name, img) {
		l.log.Info("template available: its image was built", "template", name, "image", img)
	}
	return true
}

// await holds a create of a late template whose image is being
// built until the build ends or ctx does (the request's own bound), saying
// in the log what it waits for and where the build is. A template that is
// not late, or whose image nobody builds, is left to ResolveImage to
// answer at once.
func (l *lateTemplates) await(ctx context.Context, name string) error {
	img, ok := l.awaited(name)
	if !ok || l.engine == nil {
		return nil
	}
	progress, building := l.build(img)
	if !building {
		return nil
	}
	l.log.Info("create waits for its template's image to be built", "template", name, "image", img, "build", progress)
	for last := progress; ; {
		// The build's end is read before the engine is asked: a build
		// script tags the image before it exits, so an ended build whose
		// image the engine lacks has failed.
		progress, building = l.build(img)
		if l.imageReady(ctx, name, img) {
			return nil
		}
		if !building {
			return fmt.Errorf("%w: %q: the build of its image %s ended without making it (its log says why)", sandpit.ErrUnknownTemplate, name, img)
		}
		if progress != last {
			l.log.Info("template image build progress", "template", name, "image", img, "build", progress)
			last = progress
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: template %q: its image %s is being built (%s); the create stopped waiting: %w", sandpit.ErrImageBuilding, name, img, progress, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// WatchLateTemplates looks for the images of the templates still awaited
// every interval until all are ready or ctx ends, and makes each available
// the moment its image exists.
func (s *Service) WatchLateTemplates(ctx context.Context, interval time.Duration) {
	if s.cfg.Images == nil {
		return
	}
	for {
		s.late.mu.Lock()
		pending := maps.Clone(s.late.pending)
		s.late.mu.Unlock()
		if len(pending) == 0 {
			return
		}
		for name, img := range pending {
			s.late.imageReady(ctx, name, img)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
