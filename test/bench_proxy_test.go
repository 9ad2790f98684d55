package sandpit_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// proxyBenchConns is how many keep-alive connections the load generator
// keeps open, as `wrk -c 8` does.
const proxyBenchConns = 8

// proxySchemes are the ways a client reaches the builtin preview proxy.
// needFlag names the serve flag a scheme needs; a daemon binary without it
// skips that scheme with a message rather than measuring something else.
var proxySchemes = []struct {
	name     string
	needFlag string
	args     []string
}{
	{name: "http"},
	// The builtin router's own TLS (`--tls internal`): the proxy listener
	// answers HTTPS with a certificate of its internal CA, which the load
	// generator does not verify (it measures the proxy, not the PKI).
	{name: "https", needFlag: "--tls", args: []string{"--tls", "internal"}},
}

// BenchmarkPreviewProxy measures, in one run, the same load generator (8
// keep-alive connections, each a goroutine sending one GET after another,
// as `wrk -c 8 -t 8`) fetching a 1 KiB file from busybox httpd in a sandbox
// two ways:
//
//   - direct: straight to the container's address on the sandbox network,
//     the baseline. busybox httpd closes every connection, so the generator
//     opens one connection per request here.
//   - proxy: through the builtin preview proxy's listener with the preview
//     Host; the client's connections to the proxy stay open and the proxy
//     opens one upstream connection per request, as the direct client does.
//
// Each side makes b.N requests; the two sides alternate in rounds so that
// the load other work puts on the machine falls on both. It reports each
// side's requests/s and p50, the ratio proxy/direct of the rates, and the
// daemon's CPU time per proxied request (utime+stime from /proc/<pid>/stat,
// read before and after the proxied rounds; daemon-idle-µs/req is the same
// figure over the direct rounds, which the daemon does not serve: its
// background work, the noise floor of the figure).
//
//	go test -run '^$' -bench BenchmarkPreviewProxy -benchtime 20000x ./test/
func BenchmarkPreviewProxy(b *testing.B) {
	for _, sc := range proxySchemes {
		b.Run("scheme="+sc.name, func(b *testing.B) {
			if sc.needFlag != "" && !serveHasFlag(b, sc.needFlag) {
				b.Skipf("the builtin router has no %s flag in this build: %s through the proxy is not measured", sc.needFlag, sc.name)
			}
			benchPreviewProxy(b, sc.name, sc.args)
		})
	}
}

func benchPreviewProxy(b *testing.B, scheme string, args []string) {
	// SANDPIT_PROXY_PROFILE=<prefix> takes a CPU profile of the daemon
	// during each load, written to <prefix>-<scheme>-<upstream>.pprof
	// (the daemon runs with --pprof): the direct rounds do not reach it, so
	// the profile is the proxy's.
	profile := os.Getenv("SANDPIT_PROXY_PROFILE")
	if profile != "" {
		args = append(append([]string{}, args...), "--pprof")
	}
	d := harness.Start(b, sandpitBin, harness.Options{Args: args})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	sb, err := d.Client().Create(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	res, err := d.Client().Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c",
		"mkdir -p /tmp/www && head -c 1024 /dev/zero | tr '\\0' x > /tmp/www/f && httpd -p 8080 -h /tmp/www"}, TimeoutS: 30})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("httpd: %v %+v", err, res)
	}
	web, err := expose(ctx, d, sb.ID, 8080, "http")
	if err != nil || web.status != http.StatusCreated {
		b.Fatalf("expose 8080: %+v %v", web, err)
	}
	pub, err := url.Parse(web.port.PublicURL)
	if err != nil {
		b.Fatal(err)
	}
	ip := sandboxIP(b, d.Network, sb.ID)

	// Two upstreams. busybox httpd closes every connection, so the proxy
	// (like the direct client) opens one upstream connection per request:
	// the kernel's TCP work dominates both sides. The sandbox's agent keeps
	// its connections (a Go server): its GET /health, reached through the
	// agent's preview route (<port> 49983 in the preview host, as E2B
	// clients reach it), measures the proxy's own cost per request, with
	// upstream connections reused.
	label, rest, _ := strings.Cut(pub.Host, ".")
	agentHost := strings.Replace(label, "8080", strconv.Itoa(agentPort), 1) + "." + rest
	upstreams := []struct {
		name            string
		direct, proxied loadTarget
	}{
		{"close", loadTarget{url: "http://" + net.JoinHostPort(ip, "8080") + "/f"}, loadTarget{url: scheme + "://" + d.ProxyAddr + "/f", host: pub.Host}},
		{"keepalive", loadTarget{url: "http://" + net.JoinHostPort(ip, strconv.Itoa(agentPort)) + "/health", empty: true}, loadTarget{url: scheme + "://" + d.ProxyAddr + "/health", host: agentHost, empty: true}},
	}
	for _, up := range upstreams {
		for _, tg := range []loadTarget{up.direct, up.proxied} {
			if err := tg.warm(ctx, 10*time.Second); err != nil {
				b.Fatalf("%s (Host %s): %v", tg.url, tg.host, err)
			}
		}
		// The daemon is made once; the load is a sub-benchmark, which the
		// testing package calls again for each b.N it tries.
		b.Run("upstream="+up.name+"/conns="+strconv.Itoa(proxyBenchConns), func(b *testing.B) {
			// The testing package's first call (b.N = 1) is too short to
			// profile.
			if profile != "" && b.N > 1 {
				defer cpuProfile(b, d, fmt.Sprintf("%s-%s-%s.pprof", profile, scheme, up.name))()
			}
			loadSideBySide(b, ctx, d.Pid(), up.direct, up.proxied)
		})
	}
}

// agentPort is the in-sandbox agent's port, which has a preview route of
// its own in every sandbox.
const agentPort = 49983

// loadSideBySide makes b.N requests to each target, alternating between
// them in rounds, and reports both sides' figures and the daemon's CPU.
func loadSideBySide(b *testing.B, ctx context.Context, pid int, direct, proxied loadTarget) {
	const rounds = 4
	var directRun, proxyRun loadRun
	var directCPU, proxyCPU, directClient, proxyClient cpuTime
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r == rounds-1 {
			n = b.N - n*(rounds-1)
		}
		if n == 0 {
			continue
		}
		before, cBefore := daemonCPU(b, pid), selfCPU(b)
		directRun.add(direct.run(b, ctx, n, proxyBenchConns))
		mid, cMid := daemonCPU(b, pid), selfCPU(b)
		proxyRun.add(proxied.run(b, ctx, n, proxyBenchConns))
		after, cAfter := daemonCPU(b, pid), selfCPU(b)
		directCPU = directCPU.plus(mid.minus(before))
		proxyCPU = proxyCPU.plus(after.minus(mid))
		directClient = directClient.plus(cMid.minus(cBefore))
		proxyClient = proxyClient.plus(cAfter.minus(cMid))
	}
	b.StopTimer()

	dRate, pRate := directRun.rate(), proxyRun.rate()
	perReq := func(d time.Duration, lr loadRun) float64 { return float64(d.Microseconds()) / float64(len(lr.lat)) }
	b.ReportMetric(dRate, "direct-req/s")
	b.ReportMetric(pRate, "proxy-req/s")
	b.ReportMetric(pRate/dRate, "proxy/direct")
	b.ReportMetric(harness.Millis(harness.Percentile(directRun.lat, 0.50)), "direct-p50-ms")
	b.ReportMetric(harness.Millis(harness.Percentile(proxyRun.lat, 0.50)), "proxy-p50-ms")
	b.ReportMetric(perReq(proxyCPU.total(), proxyRun), "daemon-µs/req")
	// The split: user is the daemon's own code (HTTP parsing, routing,
	// copying); system is the kernel's, mostly the upstream connection's
	// TCP work through the sandbox's veth and netfilter, which runs in the
	// dialing process.
	b.ReportMetric(perReq(proxyCPU.user, proxyRun), "daemon-user-µs/req")
	b.ReportMetric(perReq(proxyCPU.sys, proxyRun), "daemon-sys-µs/req")
	b.ReportMetric(perReq(directCPU.total(), directRun), "daemon-idle-µs/req")
	// The baseline for the connection's cost: the load generator's own CPU
	// per direct request, where it opens one connection per request as the
	// proxy does upstream (and per proxied request, over kept-alive
	// connections).
	b.ReportMetric(perReq(directClient.total(), directRun), "client-direct-µs/req")
	b.ReportMetric(perReq(proxyClient.total(), proxyRun), "client-proxy-µs/req")
	b.ReportMetric(0, "ns/op")
}

// loadTarget is one URL the load generator fetches, with the Host it sends.
type loadTarget struct {
	url  string
	host string
	// empty: the answer is a 204 without a body (the agent's /health),
	// not the 1 KiB file.
	empty bool
}

func (tg loadTarget) request(ctx context.Context) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tg.url, nil)
	if tg.host != "" {
		req.Host = tg.host
	}
	return req
}

// client is one load connection: a transport of its own holding at most
// one connection, kept alive for as long as the server allows.
func (tg loadTarget) client() *http.Client {
	host, _, err := net.SplitHostPort(tg.host)
	if err != nil {
		host = tg.host
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxConnsPerHost:     1,
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
		// The preview host is the server name, as a browser sends it: the
		// daemon picks the certificate by it and refuses a handshake
		// without one. The internal CA's certificate is not what is
		// measured.
		TLSClientConfig: &tls.Config{ServerName: host, InsecureSkipVerify: true},
	}}
}

func (tg loadTarget) get(ctx context.Context, hc *http.Client) error {
	resp, err := hc.Do(tg.request(ctx))
	if err != nil {
		return err
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	want, size := http.StatusOK, int64(1024)
	if tg.empty {
		want, size = http.StatusNoContent, 0
	}
	if resp.StatusCode != want || n != size {
		return fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
	}
	return nil
}

// warm waits until the target answers (the route and httpd are up).
func (tg loadTarget) warm(ctx context.Context, budget time.Duration) error {
	hc := tg.client()
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(budget)
	for {
		err := tg.get(ctx, hc)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run makes n requests over conns connections at once.
func (tg loadTarget) run(b *testing.B, ctx context.Context, n, conns int) loadRun {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, n)
		errs []error
	)
	left := make(chan struct{}, n)
	for range n {
		left <- struct{}{}
	}
	close(left)
	start := time.Now()
	for range conns {
		wg.Go(func() {
			hc := tg.client()
			defer hc.CloseIdleConnections()
			mine := make([]time.Duration, 0, n/conns+1)
			for range left {
				t0 := time.Now()
				if err := tg.get(ctx, hc); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(errs) > 0 {
		b.Fatalf("%s: %d connections failed, first: %v", tg.url, len(errs), errs[0])
	}
	return loadRun{lat: lat, elapsed: elapsed}
}

// loadRun is what rounds of load measured, summed.
type loadRun struct {
	lat     []time.Duration
	elapsed time.Duration
}

func (lr *loadRun) add(o loadRun) {
	lr.lat = append(lr.lat, o.lat...)
	lr.elapsed += o.elapsed
}

func (lr *loadRun) rate() float64 {
	if lr.elapsed <= 0 {
		return 0
	}
	return float64(len(lr.lat)) / lr.elapsed.Seconds()
}

// cpuTime is a process's CPU time, user and system apart.
type cpuTime struct{ user, sys time.Duration }

func (c cpuTime) minus(o cpuTime) cpuTime { return cpuTime{c.user - o.user, c.sys - o.sys} }
func (c cpuTime) plus(o cpuTime) cpuTime  { return cpuTime{c.user + o.user, c.sys + o.sys} }
func (c cpuTime) total() time.Duration    { return c.user + c.sys }

// daemonCPU is the CPU time the process has used, from /proc/<pid>/stat, in
// clock ticks of 1/100 s (USER_HZ on Linux).
func daemonCPU(b *testing.B, pid int) cpuTime {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatalf("read daemon stat: %v", err)
	}
	// The command name in parentheses may hold spaces; the fields after
	// it are fixed: utime and stime are the 12th and 13th.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("daemon stat %q: %v %v", s, err1, err2)
	}
	return cpuTime{time.Duration(utime) * 10 * time.Millisecond, time.Duration(stime) * 10 * time.Millisecond}
}

// selfCPU is the CPU time this process (the load generator) has used.
func selfCPU(b *testing.B) cpuTime {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return cpuTime{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}

// sandboxIP is a sandbox's address on the daemon's network, as the engine
// reports it.
func sandboxIP(b *testing.B, network, id string) string {
	out, err := exec.Command("docker", "inspect", "-f", `{{(index .NetworkSettings.Networks "`+network+`").IPAddress}}`, "sandpit-"+id).Output()
	ip := strings.TrimSpace(string(out))
	if err != nil || net.ParseIP(ip) == nil {
		b.Fatalf("address of sandbox %s: %q %v", id, ip, err)
	}
	return ip
}

// serveHasFlag reports whether `sandpit serve` of the binary under test
// declares the flag.
func serveHasFlag(b *testing.B, flag string) bool {
	out, _ := exec.Command(sandpitBin, "serve", "--help").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == flag || f[0] == "-"+strings.TrimPrefix(flag, "--")) {
			return true
		}
	}
	return false
}

// cpuProfile starts a CPU profile of the daemon (served by --pprof) and
// returns the function that waits for it and writes it to path. The
// profile lasts 5 seconds: make the load last at least that long.
func cpuProfile(b *testing.B, d *harness.Daemon, path string) func() {
	req, _ := http.NewRequest(http.MethodGet, d.URL()+"/debug/pprof/profile?seconds=5", nil)
	req.Header.Set("Authorization", "Bearer "+d.Token)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("profile: %s", resp.Status)
			return
		}
		f, err := os.Create(path)
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("CPU profile: %v", err)
			return
		}
		b.Logf("CPU profile of the daemon in %s", path)
	}
}
