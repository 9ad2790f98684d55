// Package testkit holds the small helpers that tests of every package
// share: waiting for a condition and finding a free loopback port.
//
// It imports nothing but the standard library, unlike its parent testenv
// (which builds a service for fuzz targets), so that the in-package tests
// of the packages testenv depends on (agent, cluster, service) can use it
// too without an import cycle. Nothing outside tests should import it.
package testkit

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PollInterval is how long Eventually sleeps between two checks: short
// enough that a test does not wait long after its condition holds, long
// enough that a check which sends requests to a daemon (or to three) does
// not crowd a small machine.
const PollInterval = 100 * time.Millisecond

// Eventually calls check until it returns nil or budget has passed, and then
// fails the test with what and check's last error. Servers started in a
// sandbox take a moment to listen, a cluster a moment to agree, so tests
// poll rather than sleep a fixed time.
func Eventually(t testing.TB, budget time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(budget)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if what == "" {
				t.Fatalf("after %s: %v", budget, err)
			}
			t.Fatalf("%s (after %s): %v", what, budget, err)
		}
		time.Sleep(PollInterval)
	}
}

// FreePort returns a loopback port that was free a moment ago. Another
// process may take it before the caller binds it, so it is for listeners
// that cannot be told to take port 0 (gossip binds TCP and UDP on one port;
// a daemon's flags name a port), and callers that can retry should.
//
// It is picked below the kernel's ephemeral range: a daemon restarted on
// the ports it had leaves them free for a moment, and a port of the
// ephemeral range can then be taken by any outbound connection on the
// machine (a test holding 25,000 of them took one); below the range only
// an explicit bind can take it. It is also below 22000: the default host-port
// pool (22000-23000) and the pools tests choose (harness.FreeRange, from
// 23001) lie above it, so a daemon's API port is never one its own pool, or
// another test daemon's, hands to an exposure (one was, and the exposure
// failed with "address already in use").
func FreePort(t testing.TB) int {
	t.Helper()
	const floor, top = 10000, 22000
	if ephemeralLow() > top {
		for range 200 {
			port := floor + rand.IntN(top-floor)
			if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				ln.Close()
				return port
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default 32768 where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
