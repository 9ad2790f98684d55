package egress_test

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/egress"
)

// TestCloseRightAfterListen closes servers the moment Listen returns. The
// DNS servers start in goroutines, so a Close that races them must still
// stop them rather than leave Close waiting for servers it failed to shut
// down.
func TestCloseRightAfterListen(t *testing.T) {
	for i := range 200 {
		s := egress.New(egress.Config{})
		if _, err := s.Listen(loopback); err != nil {
			t.Fatalf("Listen: %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: Close: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Close did not return", i)
		}
	}
}

func TestCloseTwice(t *testing.T) {
	s := egress.New(egress.Config{})
	ports, err := s.Listen(loopback)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Closed means the ports are free again.
	if c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(loopback, uint16(ports.ProxyPort)).String(), time.Second); err == nil {
		c.Close()
		t.Error("the proxy still accepts connections after Close")
	}
	if pc, err := net.ListenPacket("udp4", netip.AddrPortFrom(loopback, uint16(ports.DNSPort)).String()); err != nil {
		t.Errorf("the DNS port is still taken after Close: %v", err)
	} else {
		pc.Close()
	}
}

func TestCloseUnstarted(t *testing.T) {
	if err := egress.New(egress.Config{}).Close(); err != nil {
		t.Errorf("Close of a server never started: %v", err)
	}
}

// TestProxyResetsDirect dials the proxy itself rather than being redirected
// to it by the firewall: with rules or without, the connection has no
// original destination to splice to and must be reset at once.
func TestProxyResetsDirect(t *testing.T) {
	for _, withRules := range []bool{false, true} {
		f := newFixture(t)
		if withRules {
			f.s.Set(loopback, egress.Rules{SandboxID: "sb1", AllowDomains: []string{"allowed.test"}, None: true})
		}
		c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(loopback, uint16(f.ports.ProxyPort)).String(), 5*time.Second)
		// On the loopback the reset can come before the dial has
		// finished, and then fails the dial itself.
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = io.ReadAll(c)
			c.Close()
		}
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("rules %v: reading from the proxy gave %v, want a connection reset", withRules, err)
		}
		if ds, total := f.s.Denials("sb1"); len(ds) != 0 || total != 0 {
			t.Errorf("rules %v: a connection that was not redirected was recorded: %+v", withRules, ds)
		}
	}
}
