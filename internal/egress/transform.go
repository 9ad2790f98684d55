package egress

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/sandpit-dev/sandpit"
)

// HostTransform is what the proxy does to the requests of the hosts a
// pattern matches: the headers it sets, in order, their values holding
// placeholders still. A host with a transform is the only kind whose TLS
// the proxy terminates.
type HostTransform struct {
	Pattern string
	Headers []Header
}

// Header is one header a transform sets.
type Header struct {
	Name, Value string
}

// Bounds of a policy's rules: each header goes into every request to its
// host, so the bounds keep a request within what servers accept.
const (
	maxRuleHosts     = 64
	maxRulesPerHost  = 16
	maxRuleHeaders   = 32
	maxHeaderValue   = 8 << 10
	maxHeaderNameLen = 256
)

// reservedHeaders frame the request or the connection: the proxy owns them,
// so a rule may not set them.
var reservedHeaders = []string{"Host", "Connection", "Content-Length", "Transfer-Encoding", "Upgrade", "Te", "Trailer",
	"Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Expect"}

// Placeholders a header value may hold are ours and E2B's on its wire (see
// sandpit.SecretRefs).
var (
	// openers start something that looks like a placeholder; one that is
	// not a whole placeholder is refused, so a typo is an error at create
	// rather than a literal "{{secret:..." sent to an API.
	openers = []string{"{{secret:", "${e2b.secrets.", "${e2b.identity."}
)

// NormalizeRules checks a policy's rules and returns them canonical: host
// patterns lower case (as NormalizeDomain makes them), headers as given. A
// rule grants no access: allow and deny lists decide what is reached.
func NormalizeRules(rules map[string][]sandpit.NetworkRule) (map[string][]sandpit.NetworkRule, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	if len(rules) > maxRuleHosts {
		return nil, fmt.Errorf("%w: network rules: at most %d hosts", ErrInvalid, maxRuleHosts)
	}
	out := make(map[string][]sandpit.NetworkRule, len(rules))
	for host, list := range rules {
		// A port in the key (E2B's getHost gives host:port when the
		// domain has one) is dropped: a rule is the host's on every port.
		if h, port, err := net.SplitHostPort(host); err == nil && port != "" && strings.Trim(port, "0123456789") == "" {
			host = h
		}
		h, err := NormalizeDomain(host)
		if err != nil {
			return nil, fmt.Errorf("network rules: %w (a rule's key is a host name or \"*.example.com\")", err)
		}
		if _, dup := out[h]; dup {
			return nil, fmt.Errorf("%w: network rules: host %q is given twice", ErrInvalid, h)
		}
		if len(list) > maxRulesPerHost {
			return nil, fmt.Errorf("%w: network rules for %s: at most %d rules", ErrInvalid, h, maxRulesPerHost)
		}
		kept := make([]sandpit.NetworkRule, 0, len(list))
		for _, r := range list {
			if r.Transform == nil {
				kept = append(kept, sandpit.NetworkRule{})
				continue
			}
			if len(r.Transform.Headers) > maxRuleHeaders {
				return nil, fmt.Errorf("%w: network rules for %s: at most %d headers a rule", ErrInvalid, h, maxRuleHeaders)
			}
			for name, value := range r.Transform.Headers {
				if err := checkHeader(name, value); err != nil {
					return nil, fmt.Errorf("network rules for %s: %w", h, err)
				}
			}
			kept = append(kept, sandpit.NetworkRule{Transform: &sandpit.NetworkTransform{Headers: r.Transform.Headers}})
		}
		out[h] = kept
	}
	return out, nil
}

func checkHeader(name, value string) error {
	switch {
	case len(name) > maxHeaderNameLen || !httpguts.ValidHeaderFieldName(name):
		return fmt.Errorf("%w: %q is not a header name", ErrInvalid, name)
	case slices.Contains(reservedHeaders, http.CanonicalHeaderKey(name)):
		return fmt.Errorf("%w: header %s frames the request and cannot be set by a rule", ErrInvalid, name)
	case len(value) > maxHeaderValue:
		return fmt.Errorf("%w: header %s: a value holds at most %d bytes", ErrInvalid, name, maxHeaderValue)
	case !httpguts.ValidHeaderFieldValue(value):
		return fmt.Errorf("%w: header %s: the value holds a character a header cannot (a line break or a control character)", ErrInvalid, name)
	}
	rest := sandpit.WithoutSecretRefs(value)
	for _, o := range openers {
		if strings.Contains(rest, o) {
			if o == "${e2b.identity." {
				return fmt.Errorf("%w: header %s: workload identity tokens (${e2b.identity...}) are not supported by sandpit", ErrInvalid, name)
			}
			return fmt.Errorf("%w: header %s: %q starts a placeholder that is not whole: write {{secret:NAME}} or ${e2b.secrets.NAME}", ErrInvalid, name, o)
		}
	}
	return nil
}

// Transforms are a policy's rules as the proxy applies them: one transform
// a host, its rules' headers merged in order (a later rule's header
// replaces an earlier one of the same name).
func Transforms(rules map[string][]sandpit.NetworkRule) []HostTransform {
	var out []HostTransform
	for host, list := range rules {
		t := HostTransform{Pattern: host}
		for _, r := range list {
			if r.Transform == nil {
				continue
			}
			names := make([]string, 0, len(r.Transform.Headers))
			for n := range r.Transform.Headers {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				t.Headers = slices.DeleteFunc(t.Headers, func(h Header) bool { return strings.EqualFold(h.Name, n) })
				t.Headers = append(t.Headers, Header{Name: n, Value: r.Transform.Headers[n]})
			}
		}
		if len(t.Headers) > 0 {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b HostTransform) int { return strings.Compare(a.Pattern, b.Pattern) })
	return out
}

// transformFor returns the transform of a name: an exact pattern first,
// else the longest wildcard that matches, as on E2B; the sets are never
// merged.
func (r *Rules) transformFor(name string) (HostTransform, bool) {
	if name == "" {
		return HostTransform{}, false
	}
	best := -1
	for i, t := range r.Transforms {
		if t.Pattern == name {
			return t, true
		}
		if suffix, ok := strings.CutPrefix(t.Pattern, "*"); ok && strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
			if best < 0 || len(t.Pattern) > len(r.Transforms[best].Pattern) {
				best = i
			}
		}
	}
	if best < 0 {
		return HostTransform{}, false
	}
	return r.Transforms[best], true
}

// ErrNoSecret: a placeholder names a secret its owner does not have.
var ErrNoSecret = errors.New("no such secret")

// SecretNames are the secrets a policy's rules name, sorted, without
// repeats.
func SecretNames(rules map[string][]sandpit.NetworkRule) []string {
	var out []string
	for _, list := range rules {
		for _, r := range list {
			if r.Transform == nil {
				continue
			}
			for _, v := range r.Transform.Headers {
				for _, n := range sandpit.SecretRefs(v) {
					if !slices.Contains(out, n) {
						out = append(out, n)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
