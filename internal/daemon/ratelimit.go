package daemon

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/filesig"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// clientLimiter is the API listener's per-client limiter.
func clientLimiter(cfg Config) *httpguard.Limiter {
	return httpguard.NewLimiter(httpguard.ClientLimits{
		UnauthRate:   max(cfg.UnauthRateLimit, 0),
		FailureRate:  max(cfg.AuthFailureRateLimit, 0),
		Exempt:       cfg.RateLimitExempt,
		FailureDelay: max(cfg.AuthFailureDelay, 0),
	})
}

// servedWithoutCredential says which API requests are served on the strength
// of their URL alone: E2B's signed file URLs at the root, which name no
// sandbox and carry no token (see e2b.Handler.SignedFiles), and Daytona's
// signed file URLs (daytona.SignedFileRequest). Every other
// route needs a credential, and refusing one is counted as a failure.
func servedWithoutCredential(r *http.Request) bool {
	if rest, ok := strings.CutPrefix(r.URL.Path, daytona.DefaultPrefix); ok {
		return daytona.SignedFileRequest(rest, r.URL.Query())
	}
	return r.URL.Path == "/files" && r.Header.Get("E2b-Sandbox-Id") == "" &&
		r.URL.Query().Get(filesig.ParamSignature) != ""
}

// ParseClientPrefix parses --rate-limit-exempt: an address or a CIDR.
func ParseClientPrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("--rate-limit-exempt %q: %w", s, err)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--rate-limit-exempt %q: not an address or CIDR", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
