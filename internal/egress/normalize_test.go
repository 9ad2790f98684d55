package egress_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/egress"
)

func TestNormalizeDomainAccepts(t *testing.T) {
	// A name of exactly maxDomain (253) characters: three 63-character
	// labels and one of 61, joined by dots.
	longest := strings.Join([]string{strings.Repeat("a", 63), strings.Repeat("b", 63), strings.Repeat("c", 63), strings.Repeat("d", 61)}, ".")
	tests := []struct {
		in, want string
	}{
		{"Example.COM.", "example.com"},
		{"example.com", "example.com"},
		{"  Example.com  ", "example.com"},
		{"*.example.com", "*.example.com"},
		{"*.Example.Com.", "*.example.com"},
		{"*.co.uk", "*.co.uk"},
		{"a_b.example.com", "a_b.example.com"},
		{"a-b.example.com", "a-b.example.com"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"localhost", "localhost"},
		{"123.com", "123.com"},
		// Four numeric labels and a fifth are a name, not an address.
		{"1.2.3.4.example", "1.2.3.4.example"},
		{strings.Repeat("a", 63) + ".com", strings.Repeat("a", 63) + ".com"},
		{longest, longest},
	}
	for _, tt := range tests {
		got, err := egress.NormalizeDomain(tt.in)
		if err != nil {
			t.Errorf("NormalizeDomain(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("NormalizeDomain(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNormalizeDomainRefuses(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"empty", ""},
		{"blank", "   "},
		{"dot", "."},
		{"bare wildcard", "*"},
		{"wildcard dot", "*."},
		{"wildcard top-level domain", "*.com"},
		{"wildcard top-level domain with dot", "*.com."},
		{"inner wildcard", "a.*.com"},
		{"double wildcard", "*.*.example.com"},
		{"wildcard glued to label", "*a.example.com"},
		{"trailing wildcard", "example.*"},
		{"IPv4 address", "1.2.3.4"},
		{"IPv6 address", "2001:db8::1"},
		{"wildcard address", "*.1.2.3.4"},
		{"space", "bad domain"},
		{"leading hyphen", "-x.com"},
		{"trailing hyphen", "x-.com"},
		{"empty label", "a..com"},
		{"leading dot", ".example.com"},
		{"two final dots", "example.com.."},
		{"punctuation", "exa!mple.com"},
		{"slash", "example.com/path"},
		{"port", "example.com:443"},
		{"non-ASCII", "bücher.example"},
		{"label over 63", strings.Repeat("a", 64) + ".com"},
		{"name over 253", strings.Join([]string{strings.Repeat("a", 63), strings.Repeat("b", 63), strings.Repeat("c", 63), strings.Repeat("d", 62)}, ".")},
		{"wildcard name over 253", "*." + strings.Join([]string{strings.Repeat("a", 63), strings.Repeat("b", 63), strings.Repeat("c", 63), strings.Repeat("d", 60)}, ".")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := egress.NormalizeDomain(tt.in)
			if err == nil {
				t.Fatalf("NormalizeDomain(%q) = %q, want an error", tt.in, got)
			}
			// Callers tell a bad rule from other failures by ErrInvalid.
			if !errors.Is(err, egress.ErrInvalid) {
				t.Errorf("NormalizeDomain(%q) error %v does not wrap ErrInvalid", tt.in, err)
			}
			if got != "" {
				t.Errorf("NormalizeDomain(%q) = %q with an error, want \"\"", tt.in, got)
			}
		})
	}
}

func TestDenialString(t *testing.T) {
	tests := []struct {
		d    egress.Denial
		want string
	}{
		{egress.Denial{Kind: egress.KindDNS, Name: "pypi.org", Reason: egress.ReasonNotAllowed}, "blocked DNS pypi.org (not in allow list)"},
		{egress.Denial{Kind: egress.KindTCP, Name: "pypi.org", Addr: "203.0.113.1", Port: 443, Reason: egress.ReasonNotAllowed}, "blocked pypi.org:443 (not in allow list)"},
		// Without a name the address is what the user can recognise.
		{egress.Denial{Kind: egress.KindTCP, Addr: "203.0.113.1", Port: 80, Reason: egress.ReasonNoName}, "blocked 203.0.113.1:80 (" + egress.ReasonNoName + ")"},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.d, got, tt.want)
		}
	}
}
