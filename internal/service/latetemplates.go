package service

import (
	"context"
	"maps"
	"sync"
	"time"
)

// lateTemplates are the daemon's templates whose image was not built when it
// started (the code interpreter's, 1.7 GB, takes minutes to build): the
// daemon serves at once, and each becomes available as soon as the engine
// has its image, without a restart.
type lateTemplates struct {
	mu      sync.Mutex
	pending map[string]string // template name -> image awaited
	ready   map[string]string // template name -> image, once the engine has it
}

func newLateTemplates(pending map[string]string) *lateTemplates {
	return &lateTemplates{pending: maps.Clone(pending), ready: map[string]string{}}
}

// image is the image of a late template that is ready.
func (l *lateTemplates) image(name string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	img, ok := l.ready[name]
	return img, ok
}

// awaited reports whether name is a late template whose image is not built.
func (l *lateTemplates) awaited(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.pending[name]
	return ok
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

// AwaitedTemplates are the late templates whose image is not built yet
// (name -> image), for the daemon's status.
func (s *Service) AwaitedTemplates() map[string]string {
	s.late.mu.Lock()
	defer s.late.mu.Unlock()
	return maps.Clone(s.late.pending)
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
			ok, err := s.cfg.Images.HasImage(ctx, img)
			if err != nil || !ok {
				continue
			}
			s.late.mu.Lock()
			delete(s.late.pending, name)
			s.late.ready[name] = img
			s.late.mu.Unlock()
			s.log.Info("template available: its image was built", "template", name, "image", img)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
