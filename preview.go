package sandpit

import (
	"context"
	"net"
	"strconv"
	"strings"
)

// PreviewHost is a request's Host read against the preview domain. Four
// handlers stand in front of a sandbox's port (the cluster's gateway,
// Daytona's signed-preview gate, the wake-on-preview of paused sandboxes and
// the router itself), and each needs the same reading; the first one makes it
// (ResolvePreviewHost) and the request carries it to the others, so the host
// is parsed once and every handler agrees on what it names.
type PreviewHost struct {
	// Raw is the Host the reading was made of, as the request had it; a
	// handler that rewrites the Host (the signed-preview gate) makes the
	// carried reading stale, which Raw lets the next handler see.
	Raw string
	// Host is Raw lowercased, without its port and trailing dot: the form
	// custom domains are bound under.
	Host string
	// Label is the one label before the preview domain, or "" when Host is
	// not a host directly under it (a custom domain, the API's own host).
	Label string
	// SandboxID and Port are the label's ordinary reading, "<id>-<port>"
	// (Sandpit's form) or "<port>-<id>" (the form E2B's SDKs build); OK
	// says whether it has one. A Daytona signed label, "<port>-<id>-<exp>-<mac>",
	// may read as an ordinary one too; its gate decides which it is.
	SandboxID string
	Port      int
	OK        bool
	// domain is the preview domain the reading was made against.
	domain string
}

// ParsePreviewHost reads host (a request's Host, perhaps with a port) against
// the preview domain.
func ParsePreviewHost(host, domain string) PreviewHost {
	p := PreviewHost{Raw: host, domain: domain}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	p.Host = strings.TrimSuffix(strings.ToLower(host), ".")
	suffix := "." + strings.TrimSuffix(strings.ToLower(domain), ".")
	label, ok := strings.CutSuffix(p.Host, suffix)
	if !ok || label == "" || strings.Contains(label, ".") {
		return p
	}
	p.Label = label
	p.SandboxID, p.Port, p.OK = ParsePreviewLabel(label)
	return p
}

// PortFirst reports whether the label is in E2B's form, port first
// ("49983-<id>"), as E2B's SDKs build it.
func (p PreviewHost) PortFirst() bool {
	first, _, ok := strings.Cut(p.Label, "-")
	if !ok || first == "" || len(first) > 5 {
		return false
	}
	for _, c := range first {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ParsePreviewLabel splits "<id>-<port>" (Sandpit's form) or "<port>-<id>"
// (the form E2B clients build) into id and port. Sandbox ids never start with
// a digit, so the two forms cannot be confused.
func ParsePreviewLabel(label string) (id string, port int, ok bool) {
	if first, rest, found := strings.Cut(label, "-"); found {
		if p, isPort := portLabel(first); isPort && rest != "" {
			return rest, p, true
		}
	}
	i := strings.LastIndexByte(label, '-')
	if i <= 0 {
		return "", 0, false
	}
	p, isPort := portLabel(label[i+1:])
	if !isPort {
		return "", 0, false
	}
	return label[:i], p, true
}

// portLabel reads a port written as plain decimal digits, 1-65535. Atoi
// alone would also take a sign ("+80"), which no URL the proxy hands out
// contains, and which made one host parse as two different previews.
func portLabel(s string) (int, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	p, err := strconv.Atoi(s)
	return p, err == nil && p > 0 && p < 65536
}

type previewHostKey struct{}

// WithPreviewHost returns ctx carrying p, for the handlers after this one.
func WithPreviewHost(ctx context.Context, p PreviewHost) context.Context {
	return context.WithValue(ctx, previewHostKey{}, p)
}

// ResolvePreviewHost returns the reading of host that ctx carries, when it
// was made of this same host against this same domain, and otherwise parses host and returns it with
// a ctx that carries it (fresh is then true: the caller passes the new ctx
// on with the request). A request is parsed again only where it reaches a
// handler without passing an earlier one, or after a handler rewrote its
// Host.
func ResolvePreviewHost(ctx context.Context, host, domain string) (p PreviewHost, carried context.Context, fresh bool) {
	if p, ok := ctx.Value(previewHostKey{}).(PreviewHost); ok && p.Raw == host && p.domain == domain {
		return p, ctx, false
	}
	p = ParsePreviewHost(host, domain)
	return p, WithPreviewHost(ctx, p), true
}
