package service

import (
	"context"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/templates"
)

// TemplateResolver is what the sandbox aggregate needs of the template
// aggregate (*templates.Service, which the daemon wires in with
// UseTemplates): the image and commands of an owner's template for a
// create, the commit of a snapshot, the removal of a fork's base, and the
// template part of the janitor.
type TemplateResolver interface {
	// ResolveOwned finds the caller's template ref with a ready image;
	// found is false when the caller has no template of that name.
	ResolveOwned(ctx context.Context, ref string) (r templates.Resolved, found bool, err error)
	// Snapshot makes the template of spec and commits the source's
	// container as its build (see templates.Service.Snapshot).
	Snapshot(ctx context.Context, spec templates.Spec, src templates.SnapshotSource, hold func() (user string, release func())) (sandpit.Template, error)
	DeleteTemplate(ctx context.Context, id string) error
	// Janitor removes the template images and build contexts nothing
	// accounts for; it returns the images removed.
	Janitor(ctx context.Context) int
}

// UseTemplates gives the service the template aggregate. The daemon calls
// it before the service serves anything: the template aggregate is built
// after the service, whose image policy it asks (templates.Policy).
func (s *Service) UseTemplates(t TemplateResolver) { s.tpl = t }

// noTemplates is the template aggregate of a service that has none (unit
// tests): an owner has no templates, and nothing can be built.
type noTemplates struct{}

func (noTemplates) ResolveOwned(context.Context, string) (templates.Resolved, bool, error) {
	return templates.Resolved{}, false, nil
}

func (noTemplates) Snapshot(context.Context, templates.Spec, templates.SnapshotSource, func() (string, func())) (sandpit.Template, error) {
	return sandpit.Template{}, templates.ErrBuildsUnavailable
}

func (noTemplates) DeleteTemplate(context.Context, string) error { return sandpit.ErrNotFound }

func (noTemplates) Janitor(context.Context) int { return 0 }

// CheckImage refuses an image p may not run (templates.Policy: a build
// reads only what its owner may run).
func (s *Service) CheckImage(p sandpit.Principal, image string) error { return s.checkImage(p, image) }

// DefaultResources are the CPU and memory a sandbox of the owner with
// limits l gets when its create names none (templates.Policy: a build's
// steps run under them).
func (s *Service) DefaultResources(l sandpit.OwnerLimits) (cpu float64, memMB int64, err error) {
	return s.ownerResources(CreateRequest{}, l)
}
