package sandpit_test

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeNet is a network namespace of the test's own, joined to the host by a
// veth pair and routed from the host, that stands for the world outside the
// machine: one address from TEST-NET-3 plays "the internet", one from
// 10.0.0.0/8 "the LAN" and one from 169.254.0.0/16 "the metadata service".
// Each runs a TCP listener that greets and hangs up. Sandboxes reach it the
// way they reach anything: their traffic is forwarded (and masqueraded) by
// the host.
type fakeNet struct {
	ns                       string
	internet, lan, linkLocal string // addresses
	// internet2 is a second "internet" address (from TEST-NET-2), for
	// tests that need two public hosts.
	internet2                 string
	lanCIDR                   string // the LAN's /24
	port                      int
	hostVeth, nsVeth, linkNet string
}

// greeting is what a fakeNet listener at addr writes.
func greeting(addr string) string { return "hello from " + addr }

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newFakeNet builds the namespace (retrying with other addresses when a
// parallel run holds the ones drawn) and tears it down when the test ends.
func newFakeNet(t testing.TB) *fakeNet {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("network namespace tests need root in CI")
		}
		t.Skip("network namespace tests need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("the ip command (iproute2) is required: %v", err)
	}
	taken := addressesInUse()
	var lastErr error
	for range 5 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		tag := hex.EncodeToString(b[:3])
		r := 1 + int(b[3])%250
		if taken["203.0.113."+fmt.Sprint(r)] || taken["198.51.100."+fmt.Sprint(r)] {
			continue
		}
		fn := &fakeNet{
			ns:        "sptest-" + tag,
			hostVeth:  "spth" + tag,
			nsVeth:    "sptn" + tag,
			linkNet:   fmt.Sprintf("10.252.%d.", r),
			internet:  fmt.Sprintf("203.0.113.%d", r),
			internet2: fmt.Sprintf("198.51.100.%d", r),
			lan:       fmt.Sprintf("10.253.%d.10", r),
			lanCIDR:   fmt.Sprintf("10.253.%d.0/24", r),
			linkLocal: fmt.Sprintf("169.254.%d.10", r),
		}
		if lastErr = fn.up(); lastErr == nil {
			t.Cleanup(fn.down)
			fn.listen(t)
			return fn
		}
		fn.down()
	}
	t.Fatalf("fake network: %v", lastErr)
	return nil
}

// addressesInUse are addresses the machine really uses that a route of
// the test's own must not capture: on some machines the package mirrors
// live in TEST-NET-3 too.
func addressesInUse() map[string]bool {
	out := map[string]bool{}
	for _, h := range []string{"deb.debian.org", "proxy.golang.org", "sum.golang.org", "registry.npmjs.org", "security.debian.org"} {
		addrs, _ := net.LookupHost(h)
		for _, a := range addrs {
			out[a] = true
		}
	}
	return out
}

func (fn *fakeNet) up() error {
	steps := [][]string{
		{"netns", "add", fn.ns},
		{"link", "add", fn.hostVeth, "type", "veth", "peer", "name", fn.nsVeth},
		{"link", "set", fn.nsVeth, "netns", fn.ns},
		{"addr", "add", fn.linkNet + "1/30", "dev", fn.hostVeth},
		{"link", "set", fn.hostVeth, "up"},
		{"-n", fn.ns, "addr", "add", fn.linkNet + "2/30", "dev", fn.nsVeth},
		{"-n", fn.ns, "addr", "add", fn.internet + "/32", "dev", fn.nsVeth},
		{"-n", fn.ns, "addr", "add", fn.internet2 + "/32", "dev", fn.nsVeth},
		{"-n", fn.ns, "addr", "add", fn.lan + "/32", "dev", fn.nsVeth},
		{"-n", fn.ns, "addr", "add", fn.linkLocal + "/32", "dev", fn.nsVeth},
		{"-n", fn.ns, "link", "set", fn.nsVeth, "up"},
		{"-n", fn.ns, "link", "set", "lo", "up"},
		{"route", "add", fn.internet + "/32", "via", fn.linkNet + "2", "dev", fn.hostVeth},
		{"route", "add", fn.internet2 + "/32", "via", fn.linkNet + "2", "dev", fn.hostVeth},
		{"route", "add", fn.lan + "/32", "via", fn.linkNet + "2", "dev", fn.hostVeth},
		{"route", "add", fn.linkLocal + "/32", "via", fn.linkNet + "2", "dev", fn.hostVeth},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

// down removes what up made: the routes go with the host's veth end, the
// other end with the namespace.
func (fn *fakeNet) down() {
	_ = ipCmd("link", "del", fn.hostVeth)
	_ = ipCmd("netns", "del", fn.ns)
}

// listen opens the greeting listeners: one port shared by the three
// addresses, and port 53 of the LAN and link-local ones, the DNS stand-ins
// for the daemon's resolver exception.
func (fn *fakeNet) listen(t testing.TB) {
	t.Helper()
	first := fn.listenTCP(t, fn.internet+":0")
	fn.port = first[0].Addr().(*net.TCPAddr).Port
	p := fmt.Sprint(fn.port)
	rest := fn.listenTCP(t, fn.lan+":"+p, fn.linkLocal+":"+p, fn.lan+":53", fn.linkLocal+":53")
	for _, ln := range append(first, rest...) {
		go serveGreeting(ln)
	}
}

// listenTCP opens TCP listeners inside the namespace, closed when the test
// ends. The sockets are made on a thread moved into the namespace; a socket
// keeps its namespace for life, so accepting on it from any thread works.
// The thread is never unlocked, so the runtime discards it instead of
// reusing it.
func (fn *fakeNet) listenTCP(t testing.TB, addrs ...string) []net.Listener {
	t.Helper()
	type result struct {
		lns []net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/var/run/netns/"+fn.ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		var lns []net.Listener
		for _, a := range addrs {
			ln, err := net.Listen("tcp4", a)
			if err != nil {
				for _, l := range lns {
					l.Close()
				}
				ch <- result{err: err}
				return
			}
			lns = append(lns, ln)
		}
		ch <- result{lns: lns}
	}()
	res := <-ch
	if res.err != nil {
		t.Fatalf("listen in %s: %v", fn.ns, res.err)
	}
	for _, ln := range res.lns {
		t.Cleanup(func() { ln.Close() })
	}
	return res.lns
}

// serveGreeting answers every connection with the listener's greeting.
func serveGreeting(ln net.Listener) {
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			w := bufio.NewWriter(c)
			fmt.Fprintln(w, greeting(host))
			w.Flush()
		}()
	}
}
