package templates

import (
	"context"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/dockerfile"
	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/identity"
)

// checkBuildBases reads a Dockerfile with BuildKit's parser and applies the
// image policy to every image it would make the engine read (each FROM,
// COPY --from and RUN --mount from=): a non-admin owner may build on what it
// may run (the daemon's templates, its default image, --allow-image) and on
// its own templates and snapshots, never on whatever else the engine holds,
// which may be an operator's private image or another owner's snapshot. An
// image ID, digest or ID prefix is never allowed to a non-admin: the engine
// resolves one against every image it holds. The refusal names the
// reference as written and is the same whether the image exists or not, and
// the engine never sees a refused reference, so neither the answer nor the
// build log tells a tenant which images exist.
func (s *Service) checkBuildBases(ctx context.Context, src string) error {
	f, err := dockerfile.Parse(src)
	if err != nil {
		return invalidf("%s", strings.TrimPrefix(err.Error(), dockerfile.ErrInvalid.Error()+": "))
	}
	for _, k := range f.Labels {
		if strings.HasPrefix(strings.ToLower(k), "sandpit.") {
			return policyf("a build may not set the label %q: sandpit.* labels are the daemon's", k)
		}
	}
	p := identity.Of(ctx)
	if p.Admin {
		return nil
	}
	switch {
	case f.Syntax != "":
		return policyf("a build may not name a Dockerfile frontend (# syntax=%s): the daemon's builder reads the Dockerfile itself", f.Syntax)
	case f.Onbuild > 0:
		return policyf("line %d: a build may not use ONBUILD: its trigger would run unchecked in a later build", f.Onbuild)
	case len(f.RunFlags) > 0:
		return policyf("line %d: a build step may not choose its network, security mode or devices", f.RunFlags[0])
	}
	for _, r := range f.Refs {
		if r.Kind == dockerfile.RefFrom && strings.EqualFold(r.Image, "scratch") {
			continue
		}
		if s.mayBuildOn(ctx, p.Owner, r.Image) {
			continue
		}
		return policyf("line %d: a build may not read the image %q (%s): owner %q may build on the images it may run (the daemon's templates, its default image, --allow-image) and on its own templates and snapshots, named by name, never by ID or digest", r.Line, r.Image, r.Kind, p.Owner)
	}
	return nil
}

// mayBuildOn reports whether owner may read image in a build. A store error
// refuses: the answer must not depend on anything but the policy.
func (s *Service) mayBuildOn(ctx context.Context, owner, image string) bool {
	if image == "" || dockerfile.IsImageID(image) {
		return false
	}
	if s.policy.CheckImage(identity.Of(ctx), image) == nil {
		return true
	}
	own, err := s.store.ImageOwnedBy(ctx, owner, image)
	if err != nil {
		s.log.Error("template build: check an image's owner", "err", err)
		return false
	}
	return own
}

// cacheSources bounds how many of an owner's images a build names as its
// cache sources; the newest are the likeliest to share steps with it.
const cacheSources = 64

// buildBounds are what one owner's build steps run under: the limits the
// owner's sandboxes get by default (memory, CPU, pids) on the sandboxes'
// network, and the owner's own images as the only layer cache.
func (s *Service) buildBounds(ctx context.Context, owner string) (driver.BuildLimits, []string, error) {
	l, err := s.store.GetOwnerLimits(ctx, owner)
	if err != nil {
		return driver.BuildLimits{}, nil, err
	}
	cpu, memMB, err := s.policy.DefaultResources(l)
	if err != nil {
		return driver.BuildLimits{}, nil, err
	}
	cache, err := s.store.OwnerImages(ctx, owner, cacheSources)
	if err != nil {
		return driver.BuildLimits{}, nil, err
	}
	return driver.BuildLimits{CPU: cpu, MemoryMB: memMB, PidsLimit: s.cfg.PidsLimit, Isolated: true}, cache, nil
}
