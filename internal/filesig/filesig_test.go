package filesig

import (
	"net/http"
	"net/url"
	"testing"
)

// The expected values were computed the way E2B's JS SDK computes them
// (base64 of Node's SHA-256, '=' padding stripped), not with this package.
func TestComputeMatchesTheSDK(t *testing.T) {
	tests := []struct {
		path, op, user, token, exp string
		want                       string
	}{
		{"/home/user/a b.txt", Read, "user", "tok-123", "1700000000", "v1_MY/Er8RE2BgYN5swbe9szQERanYY5vhk+ACwzwUdQyY"},
		{"rel.txt", Write, "", "tok-123", "", "v1_h5Rpv653Yw4CIALfIJ+DirrNV/f69KE/Tw2nlOdrVvE"},
	}
	for _, tt := range tests {
		if got := Compute(tt.path, tt.op, tt.user, tt.token, tt.exp); got != tt.want {
			t.Errorf("Compute(%q, %q, %q, _, %q) = %s, want %s", tt.path, tt.op, tt.user, tt.exp, got, tt.want)
		}
	}
}

func TestMatches(t *testing.T) {
	q := url.Values{
		"path":          {"/home/user/a b.txt"},
		"username":      {"user"},
		ParamExpiration: {"1700000000"},
		ParamSignature:  {"v1_MY/Er8RE2BgYN5swbe9szQERanYY5vhk+ACwzwUdQyY"},
	}
	if !Matches(http.MethodGet, q, "tok-123") {
		t.Fatal("a valid download signature does not match")
	}
	if Matches(http.MethodPost, q, "tok-123") {
		t.Fatal("a download signature matches an upload")
	}
	if Matches(http.MethodGet, q, "tok-124") {
		t.Fatal("another sandbox's token matches")
	}
	q.Set("username", "root")
	if Matches(http.MethodGet, q, "tok-123") {
		t.Fatal("the signature matches another user")
	}
}

func TestMatcherAgreesWithMatches(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		for _, exp := range []string{"", "1700000000"} {
			q := url.Values{"path": {"/tmp/x"}, ParamSignature: {Compute("/tmp/x", Operation(method), "", "tok-b", exp)}}
			if exp != "" {
				q.Set(ParamExpiration, exp)
			}
			m := Matcher(method, q)
			for _, tok := range []string{"tok-a", "tok-b", "tok-c"} {
				if got, want := m(tok), Matches(method, q, tok); got != want {
					t.Errorf("%s exp=%q token %s: Matcher %v, Matches %v", method, exp, tok, got, want)
				}
			}
		}
	}
}
