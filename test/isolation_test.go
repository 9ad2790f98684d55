package sandpit_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// probe connects from inside a sandbox to addr:port with busybox nc, sends
// send (printf escapes) and returns what the other end said and whether
// the connection was made at all (refused and timed out are not).
func probe(t *testing.T, ctx context.Context, c *client.Client, id, addr string, port int, send string) (string, bool) {
	t.Helper()
	// nc hangs up when its input ends, so a request is followed by a pause
	// in which the answer arrives.
	input := "</dev/null"
	if send != "" {
		input = ""
	}
	script := fmt.Sprintf("nc -w 3 %s %d %s 2>&1", addr, port, input)
	if send != "" {
		script = fmt.Sprintf("(printf %%b %q; sleep 2) | %s", send, script)
	}
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, TimeoutS: 20})
	if err != nil {
		t.Fatalf("probe %s:%d from %s: %v", addr, port, id, err)
	}
	if res.ExitCode != 0 {
		t.Logf("probe %s:%d from %s: exit %d: %s", addr, port, id, res.ExitCode, strings.TrimSpace(res.Stdout))
		return "", false
	}
	return res.Stdout, true
}

// reaches reports whether a fakeNet listener greeted the sandbox.
func reaches(t *testing.T, ctx context.Context, c *client.Client, id, addr string, port int) bool {
	t.Helper()
	out, ok := probe(t, ctx, c, id, addr, port, "")
	return ok && out == greeting(addr)+"\n"
}

// containerAddr is a sandbox's address on its network, as the engine reports it.
func containerAddr(t *testing.T, id string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", "sandpit-"+id).Output()
	if err != nil {
		t.Fatalf("docker inspect sandpit-%s: %v", id, err)
	}
	ip := strings.TrimSpace(string(out))
	if net.ParseIP(ip) == nil {
		t.Fatalf("sandbox %s address %q", id, ip)
	}
	return ip
}

// gateway is the sandbox's default gateway: the host's address on the
// sandbox bridge.
func gateway(t *testing.T, ctx context.Context, c *client.Client, id string) string {
	t.Helper()
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "ip route | awk '/^default/ {print $3}'"}})
	if err != nil || net.ParseIP(strings.TrimSpace(res.Stdout)) == nil {
		t.Fatalf("default gateway of %s: %v %+v", id, err, res)
	}
	return strings.TrimSpace(res.Stdout)
}

// hostListener accepts and greets on addr until the test ends.
func hostListener(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveGreeting(ln)
	return ln.Addr().(*net.TCPAddr).Port
}

// hostAddr is one of the host's own non-loopback IPv4 addresses outside
// the sandbox network (its LAN address), or "" when it has none.
func hostAddr(t *testing.T, exclude string) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && ipn.IP.String() != exclude && !strings.HasPrefix(ipn.IP.String(), "10.2") {
			return ipn.IP.String()
		}
	}
	return ""
}

// TestIsolationBetweenSandboxes: from sandbox A, sandbox B's ports (exposed
// or not) are unreachable by its container address, and so is every address
// of the host, including a listener on the bridge gateway and one on all
// addresses; B's exposed ports are reachable through the proxy and the TCP
// forward, from the host and from A alike.
func TestIsolationBetweenSandboxes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{ProxyHost: "0.0.0.0"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := d.Client()
	a, b := newSandbox(t, ctx, c), newSandbox(t, ctx, c)

	startHTTPD(t, ctx, c, b, 8080, "exposed-page")
	sh(t, ctx, c, b, "mkdir -p /tmp/secret && printf secret-page > /tmp/secret/index.html && httpd -p 8081 -h /tmp/secret")
	startEcho(t, ctx, c, b, 9000)
	web := mustExpose(t, ctx, d, b, 8080, "http", http.StatusCreated)
	fwd := mustExpose(t, ctx, d, b, 9000, "tcp", http.StatusCreated)

	bIP := containerAddr(t, b)
	gw := gateway(t, ctx, c, a)
	onGateway := hostListener(t, net.JoinHostPort(gw, "0"))
	onAll := hostListener(t, "0.0.0.0:0")
	_, proxyPortS, _ := net.SplitHostPort(d.ProxyAddr)
	proxyPort, _ := strconv.Atoi(proxyPortS)

	// The host reaches B's exposed port through the proxy (the page is
	// served) and its own listeners (they work).
	if status, body, err := proxyGet(ctx, d, web.PublicURL); err != nil || status != 200 || body != "exposed-page" {
		t.Fatalf("host through the proxy: %d %q %v", status, body, err)
	}
	if conn, err := net.Dial("tcp4", net.JoinHostPort(gw, strconv.Itoa(onGateway))); err != nil {
		t.Fatalf("host to its gateway listener: %v", err)
	} else {
		conn.Close()
	}

	unreachable := []struct {
		name string
		addr string
		port int
	}{
		{"B's unexposed port by container IP", bIP, 8081},
		{"B's exposed port by container IP", bIP, 8080},
		{"B's agent by container IP", bIP, 49983},
		{"listener on the bridge gateway", gw, onGateway},
		{"listener on all host addresses, via the gateway", gw, onAll},
		{"the daemon's API via the gateway", gw, portOf(t, d.Addr)},
	}
	if h := hostAddr(t, gw); h != "" {
		unreachable = append(unreachable, struct {
			name string
			addr string
			port int
		}{"listener on all host addresses, via " + h, h, onAll})
	}
	for _, u := range unreachable {
		if got, ok := probe(t, ctx, c, a, u.addr, u.port, ""); ok {
			t.Errorf("from A, %s (%s:%d) connected: %q", u.name, u.addr, u.port, got)
		}
	}

	// From A, B's exposed ports through the proxy and the TCP forward work.
	req := fmt.Sprintf("GET / HTTP/1.0\\r\\nHost: %s-8080.localhost\\r\\n\\r\\n", b)
	if got, _ := probe(t, ctx, c, a, gw, proxyPort, req); !strings.Contains(got, "200 OK") || !strings.Contains(got, "exposed-page") {
		t.Errorf("from A through the proxy: %q", got)
	}
	if got, _ := probe(t, ctx, c, a, gw, fwd.HostPort, "ping\\n"); !strings.Contains(got, "ping") {
		t.Errorf("from A through the TCP forward: %q", got)
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// iptablesRules is the filter table as iptables -S prints it.
func iptablesRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -S: %v: %s", err, out)
	}
	return string(out)
}

// TestEgressPolicy: with the daemon's defaults a sandbox reaches "the
// internet" and not "the LAN" nor link-local; per-sandbox policies (egress
// none, deny, allow) narrow or widen that; the rules follow the sandbox
// through stop, start, a daemon restart and delete.
func TestEgressPolicy(t *testing.T) {
	t.Parallel()
	fn := newFakeNet(t)
	var network string
	expectNetworkGone(t, &network)
	// The LAN and link-local hosts stand in for the host's resolvers too.
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--sandbox-dns", fn.lan, "--sandbox-dns", fn.linkLocal}})
	network = d.Network
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := d.Client()

	// lanDNS and linkLocalDNS are port 53 of the two resolvers.
	type reach struct{ internet, lan, linkLocal, lanDNS, linkLocalDNS bool }
	cases := []struct {
		name    string
		network *client.Network
		want    reach
	}{
		{"default", nil, reach{internet: true, lanDNS: true, linkLocalDNS: true}},
		{"egress none", &client.Network{Egress: "none"}, reach{}},
		{"deny the internet", &client.Network{Deny: []string{"203.0.113.0/24"}}, reach{lanDNS: true, linkLocalDNS: true}},
		{"allow the LAN", &client.Network{Allow: []string{fn.lanCIDR}}, reach{internet: true, lan: true, lanDNS: true, linkLocalDNS: true}},
		{"none but the LAN", &client.Network{Egress: "none", Allow: []string{fn.lanCIDR}}, reach{lan: true, lanDNS: true}},
		{"allow wins over deny", &client.Network{Allow: []string{fn.internet}, Deny: []string{"0.0.0.0/0"}}, reach{internet: true}},
		{"allow everything", &client.Network{Allow: []string{"0.0.0.0/0"}}, reach{internet: true, lan: true, lanDNS: true, linkLocalDNS: true}},
	}
	connects := func(id, addr string, port int) bool {
		_, ok := probe(t, ctx, c, id, addr, port, "")
		return ok
	}
	ids := make([]string, len(cases))
	check := func(stage string) {
		t.Helper()
		for i, tc := range cases {
			got := reach{
				internet:     reaches(t, ctx, c, ids[i], fn.internet, fn.port),
				lan:          reaches(t, ctx, c, ids[i], fn.lan, fn.port),
				linkLocal:    reaches(t, ctx, c, ids[i], fn.linkLocal, fn.port),
				lanDNS:       connects(ids[i], fn.lan, 53),
				linkLocalDNS: connects(ids[i], fn.linkLocal, 53),
			}
			if got != tc.want {
				t.Errorf("%s: %s (%s at %s): reaches %+v, want %+v", stage, tc.name, ids[i], containerAddr(t, ids[i]), got, tc.want)
				t.Logf("rules:\n%s", iptablesRules(t))
			}
		}
	}
	for i, tc := range cases {
		sb, err := c.Create(ctx, client.CreateRequest{Network: tc.network})
		if err != nil {
			t.Fatalf("%s: create: %v", tc.name, err)
		}
		ids[i] = sb.ID
		if tc.network != nil && sb.Network == nil {
			t.Errorf("%s: create response has no network policy", tc.name)
		}
	}
	check("after create")

	// Stop removes a sandbox's rules, start puts them back.
	none := ids[1]
	if !strings.Contains(iptablesRules(t), "sandpit:"+none) {
		t.Fatalf("no rule for %s:\n%s", none, iptablesRules(t))
	}
	if _, err := c.Stop(ctx, none); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(iptablesRules(t), "sandpit:"+none) {
		t.Errorf("rules of stopped %s remain", none)
	}
	if _, err := c.Start(ctx, none); err != nil {
		t.Fatal(err)
	}

	// A restarted daemon re-asserts every rule.
	d.Stop()
	d.Restart(nil)
	check("after stop/start and a daemon restart")

	// Delete removes the sandbox's rules and its chain.
	prefix := chainPrefix(t, d.Network)
	if n := countSandboxChains(iptablesRules(t), prefix); n != len(cases)-1 {
		t.Errorf("%d per-sandbox chains before delete, want %d", n, len(cases)-1)
	}
	for _, id := range ids {
		if err := c.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	rules := iptablesRules(t)
	for _, id := range ids {
		if strings.Contains(rules, "sandpit:"+id) {
			t.Errorf("rules of deleted %s remain", id)
		}
	}
	if n := countSandboxChains(rules, prefix); n != 0 {
		t.Errorf("%d per-sandbox chains after delete:\n%s", n, rules)
	}
}

// chainPrefix finds the prefix of a network's chains from the daemon's jump
// into INPUT, which names the network in its comment.
func chainPrefix(t *testing.T, network string) string {
	t.Helper()
	for _, l := range strings.Split(iptablesRules(t), "\n") {
		if strings.HasPrefix(l, "-A INPUT ") && strings.Contains(l, `"sandpit network `+network+`"`) {
			if _, target, ok := strings.Cut(l, " -j "); ok {
				return strings.TrimSuffix(strings.TrimSpace(target), "IN")
			}
		}
	}
	t.Fatalf("no INPUT jump for network %s", network)
	return ""
}

// countSandboxChains counts a network's per-sandbox chains.
func countSandboxChains(rules, prefix string) int {
	n := 0
	for _, l := range strings.Split(rules, "\n") {
		c, ok := strings.CutPrefix(l, "-N "+prefix)
		if ok && !slices.Contains([]string{"IN", "FWD", "DEF", "REJ", "LL"}, c) {
			n++
		}
	}
	return n
}

// expectNetworkGone checks, once the test's daemon is stopped and cleaned
// up, that its network and every one of its rules are gone. Register it
// before harness.Start: cleanups run last-registered first.
func expectNetworkGone(t *testing.T, network *string) {
	t.Cleanup(func() {
		rules := iptablesRules(t)
		if strings.Contains(rules, "sandpit network "+*network) {
			t.Errorf("jumps of network %s remain:\n%s", *network, rules)
		}
		if err := exec.Command("docker", "network", "inspect", *network).Run(); err == nil {
			t.Errorf("network %s remains", *network)
		}
	})
}

// TestEgressHoldsWhileDockerRearranges: Docker deletes and re-inserts its
// jump to DOCKER-USER whenever a network is created, anywhere on the
// engine. Sandboxes must stay confined through those moments: a sandbox
// hammers a blocked address while networks come and go.
func TestEgressHoldsWhileDockerRearranges(t *testing.T) {
	t.Parallel()
	fn := newFakeNet(t)
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := d.Client()
	id := newSandbox(t, ctx, c)
	if !reaches(t, ctx, c, id, fn.internet, fn.port) {
		t.Fatal("the sandbox does not reach the internet: the probe is broken")
	}

	t.Cleanup(func() {
		_ = exec.Command("docker", "network", "prune", "-f", "--filter", "label=sandpit.run="+d.Label).Run()
	})
	stop := make(chan struct{})
	churned := make(chan int)
	go func() {
		n := 0
		defer func() { churned <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// A subnet of the test pool's, so that Docker's own (small)
			// pools are left alone; a clash only costs a retry.
			var r [2]byte
			_, _ = rand.Read(r[:])
			subnet := fmt.Sprintf("10.%d.%d.0/24", 200+r[0]%4, r[1])
			name := "sandpit-churn-" + d.Label + "-" + strconv.Itoa(n)
			if exec.Command("docker", "network", "create", "--subnet", subnet, "--label", "sandpit.run="+d.Label, name).Run() == nil {
				_ = exec.Command("docker", "network", "rm", name).Run()
				n++
			}
		}
	}()
	// The sandbox probes for fifteen seconds (a refused connection takes
	// well under a millisecond) while the networks come and go.
	script := fmt.Sprintf("end=$(($(date +%%s)+15)); n=0; while [ $(date +%%s) -lt $end ]; do n=$((n+2)); "+
		"nc -w 1 %s %d </dev/null && echo REACHED %s; nc -w 1 %s %d </dev/null && echo REACHED %s; done 2>/dev/null; echo probes $n",
		fn.lan, fn.port, fn.lan, fn.linkLocal, fn.port, fn.linkLocal)
	res, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, TimeoutS: 60})
	close(stop)
	n := <-churned
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d networks created and removed during %s", n, strings.TrimSpace(res.Stdout[strings.LastIndex(res.Stdout, "probes"):]))
	if n == 0 {
		t.Errorf("no network could be created during the probes: the test proved nothing")
	}
	if strings.Contains(res.Stdout, "REACHED") || strings.Contains(res.Stdout, "hello") {
		t.Errorf("blocked addresses answered while Docker re-arranged its chains:\n%s", res.Stdout)
	}
}

// TestShutdownKeepsRulesWhileSandboxesRun: a daemon that stops while a
// sandbox runs leaves the network and the sandbox's rules in place (the
// sandbox keeps running untrusted code); once the last sandbox is deleted,
// stopping the daemon removes the network and every rule of it.
func TestShutdownKeepsRulesWhileSandboxesRun(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := d.Client()
	sb, err := c.Create(ctx, client.CreateRequest{Network: &client.Network{Egress: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	prefix := chainPrefix(t, d.Network)

	d.Stop()
	if rules := iptablesRules(t); !strings.Contains(rules, "sandpit:"+sb.ID) || !strings.Contains(rules, "sandpit network "+d.Network) {
		t.Errorf("rules gone while the sandbox runs:\n%s", rules)
	}
	if err := exec.Command("docker", "network", "inspect", d.Network).Run(); err != nil {
		t.Errorf("network %s gone while the sandbox runs: %v", d.Network, err)
	}

	d.Restart(nil)
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	d.Stop()
	rules := iptablesRules(t)
	if strings.Contains(rules, prefix) || strings.Contains(rules, "sandpit network "+d.Network) {
		t.Errorf("rules of %s remain after an empty shutdown:\n%s", d.Network, rules)
	}
	if err := exec.Command("docker", "network", "inspect", d.Network).Run(); err == nil {
		t.Errorf("network %s remains after an empty shutdown", d.Network)
	}
}

// TestNetworkPolicyBadInput: a policy the firewall cannot express is a 400
// that creates nothing.
func TestNetworkPolicyBadInput(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, body := range map[string]string{
		"unknown egress": `{"network":{"egress":"some"}}`,
		"domain":         `{"network":{"allow":["example.com"]}}`,
		"ipv6":           `{"network":{"deny":["fd00::/8"]}}`,
		"bad prefix":     `{"network":{"deny":["10.0.0.0/33"]}}`,
		"not a list":     `{"network":{"allow":"10.0.0.0/8"}}`,
	} {
		status, code, msg, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes", body, nil)
		if err != nil || status != http.StatusBadRequest || code != "bad_request" {
			t.Errorf("%s: %d %s %q %v, want 400 bad_request", name, status, code, msg, err)
		}
	}
	if got := d.Containers(t); len(got) != 0 {
		t.Errorf("%d containers after refused creates", len(got))
	}
}
