package service

import (
	"fmt"
	"net/netip"
	"path"
	"slices"

	"github.com/distribution/reference"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/firewall"
)

// policyError is a request the operator's policy refuses (403): a private
// range or an image the owner was not granted. It is sandpit.ErrForbidden to
// errors.Is, with a message of its own rather than the missing-scope one.
type policyError struct{ msg string }

func (e *policyError) Error() string        { return e.msg }
func (e *policyError) Is(target error) bool { return target == sandpit.ErrForbidden }

func policyf(format string, args ...any) error {
	return &policyError{msg: fmt.Sprintf(format, args...)}
}

// normalizeGrants validates an owner's allow_private_cidrs: IPv4 CIDRs,
// masked, deduplicated, never link-local (nothing opens cloud metadata).
func normalizeGrants(list []string) ([]string, error) {
	if len(list) > maxCIDRs {
		return nil, invalidf("allow_private_cidrs: at most %d entries", maxCIDRs)
	}
	var out []string
	for _, s := range list {
		p, err := firewall.ParseCIDR(s)
		if err != nil {
			return nil, invalidf("allow_private_cidrs: %v", err)
		}
		if isLinkLocal(p) {
			return nil, invalidf("allow_private_cidrs %s: link-local addresses (cloud metadata) are never reachable from a sandbox", p)
		}
		if !slices.Contains(out, p.String()) {
			out = append(out, p.String())
		}
	}
	return out, nil
}

// isLinkLocal reports an allow that names link-local space itself (a range
// inside 169.254.0.0/16), which the firewall refuses before any sandbox
// policy is consulted, so allowing it would be accepted and do nothing. A
// wider range that merely contains it (0.0.0.0/0) is not one.
func isLinkLocal(p netip.Prefix) bool {
	return p.Bits() >= firewall.LinkLocal.Bits() && firewall.LinkLocal.Contains(p.Addr())
}

// checkLinkLocal refuses a policy allowing link-local space (400), for
// every caller.
func checkLinkLocal(np sandpit.NetworkPolicy) error {
	for _, a := range np.Allow {
		if p, err := netip.ParsePrefix(a); err == nil && isLinkLocal(p) {
			return invalidf("network allow %s: link-local addresses (cloud metadata) are never reachable from a sandbox", p)
		}
	}
	return nil
}

// checkEgressGrant refuses (403) an allow list that would open a private or
// reserved range the operator did not grant the owner. The part of each
// allowed CIDR that lies in a blocked range must lie in one granted CIDR;
// an allow of 0.0.0.0/0 therefore needs every blocked range granted. The
// allow list is the only way a sandbox lifts the block, so a refusal here
// is the whole ceiling; admins are not limited.
func checkEgressGrant(p sandpit.Principal, limits sandpit.OwnerLimits, np sandpit.NetworkPolicy) error {
	if p.Admin {
		return nil
	}
	var grants []netip.Prefix
	for _, g := range limits.AllowPrivateCIDRs {
		if pr, err := netip.ParsePrefix(g); err == nil {
			grants = append(grants, pr)
		}
	}
	for _, a := range np.Allow {
		pr, err := netip.ParsePrefix(a)
		if err != nil {
			return invalidf("network allow %q: not a CIDR", a)
		}
		for _, b := range firewall.Blocked {
			if !pr.Overlaps(b) {
				continue
			}
			// Two overlapping prefixes nest: the overlap is the longer one.
			overlap := pr
			if b.Bits() > pr.Bits() {
				overlap = b
			}
			if !covered(grants, overlap) {
				return policyf("network allow %s opens %s, a private or reserved range owner %q may not reach: "+
					"the operator grants private ranges per owner (allow_private_cidrs in PUT /v1/owners/%s/limits, or sandpit owner limits %s --allow-private CIDR)",
					pr, overlap, limits.Owner, limits.Owner, limits.Owner)
			}
		}
	}
	return nil
}

// covered reports whether one grant contains all of p.
func covered(grants []netip.Prefix, p netip.Prefix) bool {
	for _, g := range grants {
		if g.Bits() <= p.Bits() && g.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// normalImage is an image reference in the engine's canonical form
// (docker.io/library/busybox:latest), or the reference itself when it does
// not parse.
func normalImage(image string) string {
	n, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return image
	}
	return reference.TagNameOnly(n).String()
}

// checkImage refuses (403) an image a non-admin owner may not run: anything
// but the templates' images, the default image, the warm pools' images and
// what an --allow-image pattern matches. An operator's image may hold what
// tenants must not read, so the engine's whole image store is not theirs.
func (s *Service) checkImage(p sandpit.Principal, image string) error {
	if p.Admin {
		return nil
	}
	want := normalImage(image)
	allowed := []string{s.cfg.DefaultImage}
	for _, img := range s.cfg.Templates {
		allowed = append(allowed, img)
	}
	for _, ps := range s.cfg.WarmPool {
		allowed = append(allowed, ps.Image)
	}
	allowed = append(allowed, s.late.images()...)
	for _, a := range allowed {
		if a != "" && (a == image || normalImage(a) == want) {
			return nil
		}
	}
	for _, pat := range s.cfg.AllowImages {
		if ok, _ := path.Match(pat, image); ok {
			return nil
		}
		if ok, _ := path.Match(pat, want); ok {
			return nil
		}
	}
	return policyf("image %q is not allowed for owner %q: the operator allows the daemon's templates, its default image and images matching --allow-image", image, p.Owner)
}

// ownerResources fills a create's unset cpu and memory with the owner's
// defaults, else the daemon's, and refuses (400) a request above the owner's
// per-sandbox caps or the daemon's maxima (which the host's size bounds).
// A default above a cap yields the cap.
func (s *Service) ownerResources(req CreateRequest, l sandpit.OwnerLimits) (cpu float64, memMB int64, err error) {
	maxCPU, maxMem := s.cfg.MaxCPU, s.cfg.MaxMemoryMB
	if l.MaxSandboxCPU > 0 {
		maxCPU = min(maxCPU, l.MaxSandboxCPU)
	}
	if l.MaxSandboxMemoryMB > 0 {
		maxMem = min(maxMem, l.MaxSandboxMemoryMB)
	}
	cpu, memMB = req.CPU, req.MemoryMB
	switch {
	case cpu > maxCPU && l.MaxSandboxCPU > 0 && l.MaxSandboxCPU < s.cfg.MaxCPU:
		return 0, 0, invalidf("cpu %g exceeds owner %q's per-sandbox limit of %g (max_sandbox_cpu)", cpu, l.Owner, l.MaxSandboxCPU)
	case memMB > maxMem && l.MaxSandboxMemoryMB > 0 && l.MaxSandboxMemoryMB < s.cfg.MaxMemoryMB:
		return 0, 0, invalidf("memory %d MiB exceeds owner %q's per-sandbox limit of %d MiB (max_sandbox_memory_mb)", memMB, l.Owner, l.MaxSandboxMemoryMB)
	}
	if cpu == 0 {
		cpu = s.cfg.DefaultCPU
		if l.DefaultCPU > 0 {
			cpu = l.DefaultCPU
		}
		cpu = min(cpu, maxCPU)
	}
	if memMB == 0 {
		memMB = s.cfg.DefaultMemoryMB
		if l.DefaultMemoryMB > 0 {
			memMB = l.DefaultMemoryMB
		}
		memMB = min(memMB, maxMem)
	}
	return cpu, memMB, nil
}
