package templates

import (
	"context"
	"errors"
	"strings"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/driver"
)

// janitorImages matches the images this daemon made (a build or a
// snapshot commit: labelled with its instance and the build that made
// them, tagged in its template repository) against the store, and removes
// those no row accounts for. Restart recovery alone is not enough: the
// engine finishes a commit or a build that a killed daemon asked for even
// after the next process's recovery ran, and such an image appears later,
// with no row. The labels are read only from images tagged in the daemon's
// own repository, which no tenant can tag into, and a tenant's build may
// not set sandpit.* labels (checkBuildBases), so no tenant can make the
// janitor act on an image.
func (s *Service) janitorImages(ctx context.Context) int {
	if s.cfg.Images == nil || s.cfg.TemplateDir == "" || s.cfg.Instance == "" {
		return 0
	}
	imgs, err := s.cfg.Images.ListImages(ctx, map[string]string{driver.LabelInstance: s.cfg.Instance})
	if err != nil {
		s.log.Error("janitor: list images", "err", err)
		return 0
	}
	removed := 0
	for _, img := range imgs {
		bid := img.Labels[driver.LabelTemplateBuild]
		if bid == "" || s.buildInProcess(bid) {
			continue
		}
		b, err := s.store.GetBuild(ctx, bid)
		switch {
		case errors.Is(err, sandpit.ErrNotFound):
		case err != nil:
			s.log.Error("janitor: image's build", "build", bid, "err", err)
			continue
		case !b.State.Done():
			// Being built or committed by this process (recovery ended
			// the previous process's).
			continue
		}
		for _, tag := range img.Tags {
			if !s.ownImageRef(tag) {
				continue
			}
			used, err := s.store.ImageInUse(ctx, tag)
			if err != nil || used || s.imageShared(tag) {
				continue
			}
			if err := s.cfg.Images.RemoveImage(ctx, tag); err != nil {
				// A sandbox may still run it; the engine refuses then,
				// and a later pass tries again.
				s.log.Debug("janitor: image kept", "image", tag, "err", err)
				continue
			}
			s.log.Warn("janitor: removed an image no template or snapshot records", "image", tag, "build", bid)
			removed++
		}
	}
	return removed
}

// ownImageRef reports whether ref is in the repository the daemon tags
// templates' and snapshots' images in.
func (s *Service) ownImageRef(ref string) bool {
	prefix := templateRepo + "/"
	if s.cfg.Registry != "" {
		prefix = s.cfg.Registry + "/" + prefix
	}
	return strings.HasPrefix(ref, prefix)
}

// buildInProcess reports whether this process runs the build (or a build
// it joined).
func (s *Service) buildInProcess(id string) bool {
	s.builds.mu.Lock()
	defer s.builds.mu.Unlock()
	return s.builds.byBuild[id] != nil
}

// Janitor is the template aggregate's part of the daemon's periodic
// janitor: the images no row accounts for and the build contexts past
// their time. It returns the images removed.
func (s *Service) Janitor(ctx context.Context) int {
	n := s.janitorImages(ctx)
	s.sweepContexts(ctx)
	return n
}
