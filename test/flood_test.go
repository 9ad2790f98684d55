package sandpit_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// openFDs counts the daemon's open file descriptors.
func openFDs(t testing.TB, d *harness.Daemon) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.Pid()))
	if err != nil {
		t.Fatalf("read the daemon's descriptors: %v", err)
	}
	return len(ents)
}

// holdConns opens n TCP connections to addr from the source address src
// and holds them until the test ends; with request set, each sends one
// request first (a keep-alive connection that then sits idle).
func holdConns(t testing.TB, src, addr string, n int, request string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return
			}
			if request != "" {
				fmt.Fprint(c, request)
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// holderEnv, set, makes the test binary a connection holder (holdMain):
// "ADDR N SRC...", N connections from each SRC to ADDR.
const holderEnv = "SANDPIT_TEST_HOLD_CONNS"

// holderMax is the most connections one holder process opens: each takes
// a descriptor of the holder's, and RLIMIT_NOFILE is per process (20,000
// here, a hard limit an unprivileged container cannot raise).
const holderMax = 10000

// holdMain opens the connections its spec names, reports "held N" (the
// ones dialled; the daemon may have reset some) on stdout and keeps them
// until its stdin closes, that is until the test that started it ends.
func holdMain(spec string) int {
	f := strings.Fields(spec)
	if len(f) < 3 {
		fmt.Fprintln(os.Stderr, "bad holder spec", spec)
		return 2
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad holder spec", spec)
		return 2
	}
	var (
		mu      sync.Mutex
		held    []net.Conn
		failed  int
		lastErr error
		wg      sync.WaitGroup
	)
	sem := make(chan struct{}, 64)
	for _, src := range f[2:] {
		// A listener resetting a flood's connections still lets its
		// accept queue fill, and a SYN dropped then is sent again a second,
		// three, seven seconds later: the timeout outlasts that.
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 30 * time.Second}
		for range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				c, err := d.Dial("tcp", f[0])
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed, lastErr = failed+1, err
					return
				}
				held = append(held, c)
			}()
		}
	}
	wg.Wait()
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "holder: %d of %d dials failed, the last: %v\n", failed, failed+len(held), lastErr)
	}
	fmt.Println("held", len(held))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// holdConnsApart opens n idle connections to addr from each of srcs in
// holder processes of their own (at most holderMax connections each), so
// a flood may be larger than the test process's descriptor limit, and
// keeps them until the test ends. It returns how many were dialled.
func holdConnsApart(t testing.TB, addr string, n int, srcs ...string) int {
	t.Helper()
	var specs []string
	if n > holderMax {
		// One source, split among holders.
		for left := n; left > 0; left -= holderMax {
			specs = append(specs, fmt.Sprintf("%s %d %s", addr, min(left, holderMax), srcs[0]))
		}
	} else {
		for per := holderMax / n; len(srcs) > 0; srcs = srcs[min(per, len(srcs)):] {
			specs = append(specs, fmt.Sprintf("%s %d %s", addr, n, strings.Join(srcs[:min(per, len(srcs))], " ")))
		}
	}
	total := 0
	for _, spec := range specs {
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(os.Environ(), holderEnv+"="+spec)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a connection holder: %v", err)
		}
		// Closing its stdin ends the holder; Wait reaps it.
		t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
		var got int
		if _, err := fmt.Fscanf(stdout, "held %d\n", &got); err != nil {
			t.Fatalf("connection holder: %v", err)
		}
		total += got
	}
	return total
}

// sourceClient is an API client whose connections come from src.
func sourceClient(d *harness.Daemon, src string) *client.Client {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}).DialContext}
	return client.New(d.Addr, d.Token, client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}))
}

// floodSource is the one address a flood comes from: a loopback address
// of its own, so that its tens of thousands of bound ports do not take the
// ephemeral ports of 127.0.0.1, which everything else on the machine uses.
const floodSource = "127.45.0.1"

// TestConnectionFloodDegradesOnlyItsSource: one source holding far more
// idle connections than its share, 20,000 to the preview proxy and 2,000
// to the API (some after one request each, which then sit idle), leaves
// the daemon's descriptors bounded by the default per-source share (512 a
// listener) and another source's API calls answering; the descriptor count
// is what shows the flood was refused rather than absorbed. The test
// process cannot hold 20,000 connections itself (RLIMIT_NOFILE is 20,000
// here and cannot be raised), so holder processes hold the proxy's.
func TestConnectionFloodDegradesOnlyItsSource(t *testing.T) {
	t.Parallel()
	const perSource, proxyFlood, apiFlood = 512, 20000, 1500
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 5*time.Minute)
	other := sourceClient(d, "127.0.0.2")
	if _, _, err := other.List(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("a second source before the flood: %v", err)
	}
	before := openFDs(t, d)
	held := holdConnsApart(t, d.ProxyAddr, proxyFlood, floodSource)
	t.Logf("%d connection attempts to the preview proxy, %d connected (the others were reset while connecting); the daemon holds %d descriptors (%d before)", proxyFlood, held, openFDs(t, d), before)
	holdConns(t, floodSource, d.Addr, apiFlood, "")
	holdConns(t, floodSource, d.Addr, apiFlood/3, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		if _, _, err := other.List(ctx, client.ListOptions{}); err != nil {
			t.Fatalf("another source's API call during the flood: %v", err)
		}
		if took := time.Since(t0); took > 5*time.Second {
			t.Errorf("another source's API call took %s during the flood", took)
		}
	}
	// Each listener holds at most perSource of the flood's connections:
	// two listeners, and room for the daemon's own work meanwhile.
	if got := openFDs(t, d); got > before+2*perSource+100 {
		t.Errorf("the daemon holds %d descriptors during the flood (%d before): the flood was absorbed, not refused", got, before)
	}
	if !strings.Contains(d.Logs(), "connection limit reached") {
		t.Error("the daemon did not log the refused connections")
	}
}

// TestEgressFloodDegradesOnlyItsSandbox: a sandbox with domain rules that
// opens 25,000 connections to port 80 through the egress proxy, far more
// than its share (default 1024), and holds them, idle after one request
// each, leaves the daemon's descriptors bounded, another sandbox's egress
// working, and the proxy serving the flooder again once it lets go. Two
// processes in the sandbox open 12,500 each: a process there may hold
// 20,000 descriptors.
func TestEgressFloodDegradesOnlyItsSandbox(t *testing.T) {
	t.Parallel()
	const perSandbox, flood = 1024, 25000
	ti := newTestInternet(t)
	fn := ti.fn
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--egress-resolver", ti.dnsURL}})
	ctx := ctxFor(t, 8*time.Minute)
	c := d.Client()
	rules := &client.Network{Egress: "none", AllowDomains: []string{"allowed.test"}}
	mk := func() string {
		sb, err := c.Create(ctx, client.CreateRequest{Network: rules})
		if err != nil {
			t.Fatal(err)
		}
		installProbe(t, ctx, c, sb.ID, ti)
		return sb.ID
	}
	flooder, victim := mk(), mk()
	expectReach(t, ctx, c, victim, true, "get", "http://allowed.test/")
	before := openFDs(t, d)
	hold := fmt.Sprintf("/tmp/egress-probe hold %s allowed.test %d", fn.internet, flood/2)
	res, err := c.Exec(ctx, flooder, client.ExecRequest{Cmd: "sh", Args: []string{"-c",
		hold + " > /tmp/hold1.out 2>&1 & echo $! > /tmp/hold.pid; " + hold + " > /tmp/hold2.out 2>&1 & echo $! >> /tmp/hold.pid"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the flood: %+v %v", res, err)
	}
	// The flood is under way once both holders' lines are written.
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
		out1, out2 := readFileIn(t, ctx, c, flooder, "/tmp/hold1.out"), readFileIn(t, ctx, c, flooder, "/tmp/hold2.out")
		if strings.HasPrefix(out1, "OK") && strings.HasPrefix(out2, "OK") {
			t.Logf("the flood holds: %s, %s; the daemon holds %d descriptors", strings.TrimSpace(out1), strings.TrimSpace(out2), openFDs(t, d))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flood did not finish opening its connections")
		}
	}
	expectReach(t, ctx, c, victim, true, "get", "http://allowed.test/")
	expectReach(t, ctx, c, victim, true, "sni", fn.internet, "allowed.test")
	// Two descriptors a spliced connection, perSandbox of them at most.
	if got := openFDs(t, d); got > before+2*perSandbox+100 {
		t.Errorf("the daemon holds %d descriptors during the egress flood (%d before)", got, before)
	}
	sh(t, ctx, c, flooder, "kill $(cat /tmp/hold.pid)")
	// The flooder's own connections are served again once it lets go.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if ok, _ := egressRun(t, ctx, c, flooder, "get", "http://allowed.test/"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the egress proxy does not serve the flooder after its flood")
		}
	}
}
