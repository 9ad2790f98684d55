package egress

import (
	"net/netip"
	"testing"
)

func TestMatchDomain(t *testing.T) {
	tests := []struct {
		patterns []string
		name     string
		want     bool
	}{
		{[]string{"example.com"}, "example.com", true},
		{[]string{"example.com"}, "sub.example.com", false},
		{[]string{"example.com"}, "badexample.com", false},
		{[]string{"example.com"}, "example.co", false},
		{[]string{"*.example.com"}, "sub.example.com", true},
		{[]string{"*.example.com"}, "a.b.example.com", true},
		// The wildcard covers the names below example.com, not the name
		// itself, nor names that merely end in the same letters.
		{[]string{"*.example.com"}, "example.com", false},
		{[]string{"*.example.com"}, "badexample.com", false},
		{[]string{"*.example.com"}, ".example.com", false},
		{[]string{"*.example.com"}, "example.com.evil.test", false},
		{[]string{"other.test", "*.example.com"}, "x.example.com", true},
		{[]string{"other.test", "example.com"}, "example.com", true},
		{nil, "example.com", false},
		{[]string{}, "", false},
	}
	for _, tt := range tests {
		if got := matchDomain(tt.patterns, tt.name); got != tt.want {
			t.Errorf("matchDomain(%q, %q) = %v, want %v", tt.patterns, tt.name, got, tt.want)
		}
	}
}

func TestRulesName(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		host  string
		want  nameVerdict
	}{
		{"exact allow", Rules{AllowDomains: []string{"example.com"}}, "example.com", nameAllowed},
		{"wildcard allow", Rules{AllowDomains: []string{"*.example.com"}}, "a.b.example.com", nameAllowed},
		{"wildcard does not allow parent", Rules{AllowDomains: []string{"*.example.com"}}, "example.com", nameUnlisted},
		{"wildcard does not allow lookalike", Rules{AllowDomains: []string{"*.example.com"}}, "badexample.com", nameUnlisted},
		{"deny", Rules{DenyDomains: []string{"*.example.com"}}, "x.example.com", nameDenied},
		// "deny *.example.com, allow api.example.com" must open the one
		// name, so an allow wins over a deny.
		{"allow wins over deny", Rules{AllowDomains: []string{"api.example.com"}, DenyDomains: []string{"*.example.com"}}, "api.example.com", nameAllowed},
		{"deny still covers the rest", Rules{AllowDomains: []string{"api.example.com"}, DenyDomains: []string{"*.example.com"}}, "www.example.com", nameDenied},
		{"unlisted", Rules{AllowDomains: []string{"example.com"}, DenyDomains: []string{"evil.test"}}, "other.test", nameUnlisted},
		{"learn allows all", Rules{Learn: true}, "anything.test", nameAllowed},
		{"learn allows denied", Rules{Learn: true, DenyDomains: []string{"evil.test"}}, "evil.test", nameAllowed},
		{"learn with None", Rules{Learn: true, None: true}, "anything.test", nameAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rules.name(tt.host); got != tt.want {
				t.Errorf("name(%q) = %v, want %v", tt.host, got, tt.want)
			}
		})
	}
}

func TestRulesResolvable(t *testing.T) {
	tests := []struct {
		name    string
		rules   Rules
		host    string
		want    bool
		wantWhy string
	}{
		{"allowed", Rules{AllowDomains: []string{"a.test"}, None: true}, "a.test", true, ""},
		{"unlisted with None", Rules{AllowDomains: []string{"a.test"}, None: true}, "b.test", false, ReasonNotAllowed},
		// Without None the addresses decide, so the name resolves.
		{"unlisted without None", Rules{AllowDomains: []string{"a.test"}}, "b.test", true, ""},
		{"denied", Rules{DenyDomains: []string{"b.test"}}, "b.test", false, ReasonDenied},
		{"learn", Rules{Learn: true, None: true}, "b.test", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, why := tt.rules.resolvable(tt.host)
			if ok != tt.want || why != tt.wantWhy {
				t.Errorf("resolvable(%q) = %v, %q, want %v, %q", tt.host, ok, why, tt.want, tt.wantWhy)
			}
		})
	}
}

func TestRulesPrivateAndAddress(t *testing.T) {
	operator := []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}
	tests := []struct {
		name        string
		rules       Rules
		addr        string
		wantPrivate bool
		wantAddress bool
	}{
		{"public", Rules{}, "203.0.113.1", false, true},
		{"public with None", Rules{None: true}, "203.0.113.1", false, false},
		{"RFC 1918", Rules{}, "10.1.2.3", true, false},
		{"CGNAT", Rules{}, "100.64.1.1", true, false},
		{"loopback", Rules{}, "127.0.0.1", true, false},
		{"multicast", Rules{}, "224.0.0.1", true, false},
		{"operator range", Rules{}, "10.20.1.1", false, true},
		{"sandbox allow CIDR", Rules{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}}, "192.168.1.5", false, true},
		{"deny CIDR", Rules{DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}, "203.0.113.1", false, false},
		{"allow CIDR wins over deny CIDR", Rules{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.1/32")}, DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}, "203.0.113.1", false, true},
		// Link-local (the cloud metadata service) stays shut whatever
		// the operator or the sandbox opened.
		{"link-local", Rules{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}}, "169.254.169.254", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			if got := tt.rules.private(a, operator); got != tt.wantPrivate {
				t.Errorf("private(%s) = %v, want %v", a, got, tt.wantPrivate)
			}
			if got := tt.rules.address(a, operator); got != tt.wantAddress {
				t.Errorf("address(%s) = %v, want %v", a, got, tt.wantAddress)
			}
		})
	}
}
