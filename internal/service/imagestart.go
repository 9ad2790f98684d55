package service

import (
	"context"
	"errors"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
)

// imageStart is the start and ready commands image declares in its labels
// (driver.LabelStartCmd, driver.LabelReadyCmd), as a template carrying only
// those; ok is false when it declares none. Labels are read from the engine
// each time, not cached: a tag such as :latest may move between creates.
func (s *Service) imageStart(ctx context.Context, image string) (t sandpit.Template, ok bool, err error) {
	if s.cfg.Images == nil || image == "" {
		return sandpit.Template{}, false, nil
	}
	labels, err := s.cfg.Images.ImageLabels(ctx, image)
	if errors.Is(err, driver.ErrImageNotFound) {
		return sandpit.Template{}, false, nil
	}
	if err != nil {
		return sandpit.Template{}, false, runtimeErr("inspect image", err)
	}
	t = sandpit.Template{StartCmd: labels[driver.LabelStartCmd], ReadyCmd: labels[driver.LabelReadyCmd]}
	return t, t.StartCmd != "" || t.ReadyCmd != "", nil
}

// startImage runs what sb's image declares to run at start (see
// imageStart); when started is false the start command is already running
// (a pooled container started it) and only readiness is awaited.
func (s *Service) startImage(ctx context.Context, sb sandpit.Sandbox, started bool) error {
	t, ok, err := s.imageStart(ctx, sb.Image)
	if err != nil || !ok {
		return err
	}
	if started {
		t.StartCmd = ""
	}
	return s.startTemplate(ctx, sb, t)
}
