package router

import (
	"net/http"
	"strings"

	"github.com/sandpit-dev/sandpit"
)

// Headers the daemon consumes or sets for itself, which a sandbox never
// receives. Every header whose name starts with InternalHeaderPrefix is one
// of the daemon's own (cluster forwarding marks, the forwarded principal).
const (
	InternalHeaderPrefix = sandpit.InternalHeaderPrefix
	// apiKeyHeader is how the E2B SDK presents the daemon's token.
	apiKeyHeader = sandpit.APIKeyHeader
	// previewTokenHeader is how the Daytona SDK presents a preview token,
	// a credential for the daemon's edge, not for the sandbox.
	previewTokenHeader = sandpit.PreviewTokenHeader
	// ReservedCookiePrefix starts the names of cookies that belong to the
	// daemon. Sandpit sets no cookie today; the names are reserved so that
	// one it sets later is never handed to a sandbox.
	ReservedCookiePrefix = "sandpit"
)

// StripForPreview removes from h, a request on its way from the preview
// proxy to a sandbox's server, what belongs to the daemon and not to the
// sandbox's application: Authorization and X-Api-Key when they carry one
// of the daemon's credentials (isDaemonCredential says which), cookies with
// a reserved name, the preview token header and every Sandpit-* header.
// Everything else passes, so an application behind a preview host keeps
// its own Basic or bearer authentication and the cookies its host set.
func StripForPreview(h http.Header, isDaemonCredential func(string) bool) {
	if isDaemonCredential != nil {
		if v := h.Get("Authorization"); v != "" {
			_, cred, _ := strings.Cut(v, " ")
			if isDaemonCredential(strings.TrimSpace(cred)) || isDaemonCredential(strings.TrimSpace(v)) {
				h.Del("Authorization")
			}
		}
		for _, v := range h.Values(apiKeyHeader) {
			if isDaemonCredential(strings.TrimSpace(v)) {
				h.Del(apiKeyHeader)
				break
			}
		}
	}
	stripReservedCookies(h)
	stripCommon(h)
}

// stripCommon removes the headers no sandbox receives on any path.
func stripCommon(h http.Header) {
	h.Del(previewTokenHeader)
	h.Del(TrafficTokenHeader)
	for k := range h {
		if sandpit.IsInternalHeader(k) {
			delete(h, k)
		}
	}
}

// stripReservedCookies drops the cookies whose names start with
// ReservedCookiePrefix and keeps the rest in their order.
func stripReservedCookies(h http.Header) {
	values := h.Values("Cookie")
	if len(values) == 0 {
		return
	}
	var kept []string
	for _, line := range values {
		for _, c := range strings.Split(line, ";") {
			c = strings.TrimSpace(c)
			if c == "" {
				continue
			}
			name, _, _ := strings.Cut(c, "=")
			if len(name) >= len(ReservedCookiePrefix) && strings.EqualFold(name[:len(ReservedCookiePrefix)], ReservedCookiePrefix) {
				continue
			}
			kept = append(kept, c)
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}
