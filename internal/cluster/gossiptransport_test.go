package cluster

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// TestGossipPortCapsConnections: the gossip port, like the cluster port,
// takes anyone's TCP before the keyring can tell a node from a stranger, so
// a flood of idle connections from one source is held to its share (the
// rest closed as they arrive), and a node from another source still joins
// through it (the join's push-pull is a TCP stream).
func TestGossipPortCapsConnections(t *testing.T) {
	keys := testKeys(t, "a cluster key of enough bytes")
	start := func(name string, lim httpguard.ConnLimits) *Membership {
		t.Helper()
		m, err := StartMembership(MembershipConfig{NodeName: name, Bind: "127.0.0.1:0", Keys: keys, Meta: func() Meta { return Meta{} },
			Logger: quietLogger(), Fast: true, ConnLimits: lim})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Shutdown() })
		return m
	}
	flooded := start("flooded", httpguard.ConnLimits{Total: 8, PerSource: 3})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(flooded.tr.GetAutoBindPort()))
	flood := netip.MustParseAddr("127.0.0.2")
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(flood.AsSlice())}}
	for range 10 {
		// A refused connection may be reset before the dial returns; the
		// listener's counts are what the test reads.
		if c, err := d.Dial("tcp", addr); err == nil {
			defer c.Close()
		}
	}
	for deadline := time.Now().Add(8 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, fromFlood := flooded.tr.limited.Open(flood)
		if fromFlood == 3 && flooded.tr.limited.Refused() == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flooding source holds %d gossip connections, %d refused; want 3 and 7", fromFlood, flooded.tr.limited.Refused())
		}
	}

	peer := start("peer", httpguard.ConnLimits{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := peer.Join(ctx, []string{addr}); err != nil {
		t.Fatalf("a node could not join through the flooded gossip port: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(flooded.Members()) != 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the flooded node sees %+v, want both", flooded.Members())
		}
	}
}
