package sandpit_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// Ports of the two upstreams in each benchmark sandbox.
const (
	peerClosePort     = 8080 // busybox httpd: closes every connection
	peerKeepalivePort = 8081 // testdata/keepalive-upstream: keeps them
)

// BenchmarkProxyPeers puts the builtin preview proxy beside the reverse
// proxies a user would otherwise put in front of a sandbox, in one run and
// against the same upstreams:
//
//   - direct: the load generator straight to the sandbox's address, the
//     baseline every other side's added latency is measured against.
//   - builtin-http: the daemon's preview proxy, as it runs by default.
//   - builtin-https: the same proxy with --tls internal. The listener
//     serves HTTPS only, so this is a second daemon with a sandbox of its
//     own running the same upstreams; its added latency is over
//     direct-tls, the direct baseline of that sandbox.
//   - caddy: Debian's caddy (2.6) with a Caddyfile reverse_proxy to the
//     first sandbox, as it runs by default (GOMAXPROCS the machine's CPUs,
//     upstream connections pooled).
//   - nginx: one worker process, proxy_pass to an upstream block with
//     keepalive, access log off. Skipped with a message where nginx is not
//     installed.
//
// Two upstreams: keepalive, a small Go server built from
// testdata/keepalive-upstream that keeps its connections (the proxy's own
// cost shows), and close, busybox httpd, which closes every connection (the
// kernel's TCP work per request dominates). Both answer a GET with a 1 KiB
// body. Each upstream is loaded at 1 and at 8 connections (each a goroutine
// sending one GET after another on a kept-alive connection to the side,
// as wrk does).
//
// Each side makes b.N requests in four rounds; within a round the sides
// take turns, the first one moving on by one each round, so that load the
// rest of the machine puts on it falls on all of them. For each side it
// reports req/s, p50 and p99 latency, the p50 added over the side's direct
// baseline, and the proxy process's CPU time per request (utime+stime from
// /proc/<pid>/stat over that side's turns; for nginx the master's and the
// worker's summed).
//
//	go test -run '^$' -bench BenchmarkProxyPeers -benchtime 20000x -timeout 30m ./test/
func BenchmarkProxyPeers(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	upstream := keepaliveUpstreamBinary(b)

	// SANDPIT_PROXY_PROFILE=<prefix> takes a CPU profile of the HTTP
	// daemon during each load, written to <prefix>-<upstream>-<conns>.pprof;
	// the daemon serves only the builtin-http side's turns.
	profile := os.Getenv("SANDPIT_PROXY_PROFILE")
	var plainArgs []string
	if profile != "" {
		plainArgs = []string{"--pprof"}
	}
	plain := startPeerSandbox(b, ctx, upstream, plainArgs)
	// What the run leaves out and how the proxies run, said by the first
	// load: the testing package shows only the loads' output.
	var notes []string
	sides := []*peerSide{
		{name: "direct", base: "direct"},
		{name: "builtin-http", base: "direct", pids: constPids(plain.d.Pid())},
	}
	for _, port := range []int{peerKeepalivePort, peerClosePort} {
		sides[0].targets = append(sides[0].targets, loadTarget{url: "http://" + net.JoinHostPort(plain.ip, strconv.Itoa(port)) + "/f"})
		sides[1].targets = append(sides[1].targets, loadTarget{url: "http://" + plain.d.ProxyAddr + "/f", host: plain.hosts[port]})
	}
	if serveHasFlag(b, "--tls") {
		tls := startPeerSandbox(b, ctx, upstream, []string{"--tls", "internal"})
		direct := &peerSide{name: "direct-tls", base: "direct-tls"}
		proxy := &peerSide{name: "builtin-https", base: "direct-tls", pids: constPids(tls.d.Pid())}
		for _, port := range []int{peerKeepalivePort, peerClosePort} {
			direct.targets = append(direct.targets, loadTarget{url: "http://" + net.JoinHostPort(tls.ip, strconv.Itoa(port)) + "/f"})
			proxy.targets = append(proxy.targets, loadTarget{url: "https://" + tls.d.ProxyAddr + "/f", host: tls.hosts[port]})
		}
		sides = append(sides, direct, proxy)
	} else {
		notes = append(notes, "the builtin router has no --tls flag in this build: HTTPS through it is not measured")
	}
	upstreams := []string{net.JoinHostPort(plain.ip, strconv.Itoa(peerKeepalivePort)), net.JoinHostPort(plain.ip, strconv.Itoa(peerClosePort))}
	if bin, err := exec.LookPath("caddy"); err == nil {
		sides = append(sides, startCaddyPeer(b, bin, upstreams))
	} else {
		notes = append(notes, "caddy is not installed (apt-get install caddy): not measured")
	}
	if bin, err := exec.LookPath("nginx"); err == nil {
		sides = append(sides, startNginxPeer(b, bin, upstreams))
	} else {
		notes = append(notes, "nginx is not installed (apt-get install nginx): not measured")
	}
	notes = append(notes, fmt.Sprintf("settings: sandpit and caddy GOMAXPROCS unset (the machine's %d CPUs), nginx worker_processes 1; the load generator runs on the same machine", runtime.NumCPU()))

	for _, s := range sides {
		for _, tg := range s.targets {
			if err := tg.warm(ctx, 10*time.Second); err != nil {
				b.Fatalf("%s: %s (Host %s): %v", s.name, tg.url, tg.host, err)
			}
		}
	}
	for i, up := range []string{"keepalive", "close"} {
		for _, conns := range []int{1, 8} {
			b.Run(fmt.Sprintf("upstream=%s/conns=%d", up, conns), func(b *testing.B) {
				// The testing package's first call (b.N = 1) is too
				// short to profile.
				if i == 0 && conns == 1 && b.N > 1 {
					for _, n := range notes {
						b.Log(n)
					}
				}
				if profile != "" && b.N > 1 {
					defer cpuProfile(b, plain.d, fmt.Sprintf("%s-%s-%d.pprof", profile, up, conns))()
				}
				loadPeers(b, ctx, sides, i, conns)
			})
		}
	}
}

// peerSide is one way to reach the upstreams: targets[i] is upstream i
// (keepalive, close) through it. pids lists the processes whose CPU time
// is the side's; none for a direct baseline.
type peerSide struct {
	name    string
	base    string // the direct side this one's added latency is over
	targets []loadTarget
	pids    func(b *testing.B) []int
}

func constPids(pid int) func(*testing.B) []int {
	return func(*testing.B) []int { return []int{pid} }
}

// loadPeers runs b.N requests to upstream up through each side, in rounds
// of turns, and reports the figures.
func loadPeers(b *testing.B, ctx context.Context, sides []*peerSide, up, conns int) {
	const rounds = 4
	runs := make([]loadRun, len(sides))
	cpu := make([]cpuTime, len(sides))
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r == rounds-1 {
			n = b.N - n*(rounds-1)
		}
		if n == 0 {
			continue
		}
		for k := range sides {
			i := (k + r) % len(sides)
			s := sides[i]
			var pids []int
			if s.pids != nil {
				pids = s.pids(b)
			}
			before := processesCPU(b, pids)
			runs[i].add(s.targets[up].run(b, ctx, n, conns))
			cpu[i] = cpu[i].plus(processesCPU(b, pids).minus(before))
		}
	}
	b.StopTimer()

	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	p50 := map[string]time.Duration{}
	for i, s := range sides {
		p50[s.name] = harness.Percentile(runs[i].lat, 0.50)
	}
	for i, s := range sides {
		lr := runs[i]
		b.ReportMetric(lr.rate(), s.name+"-req/s")
		b.ReportMetric(us(p50[s.name]), s.name+"-p50-µs")
		b.ReportMetric(us(harness.Percentile(lr.lat, 0.99)), s.name+"-p99-µs")
		if s.pids == nil {
			continue
		}
		b.ReportMetric(us(p50[s.name]-p50[s.base]), s.name+"-added-p50-µs")
		b.ReportMetric(us(cpu[i].total())/float64(len(lr.lat)), s.name+"-cpu-µs/req")
	}
	b.ReportMetric(0, "ns/op")
}

// processesCPU is the CPU time the processes have used, summed.
func processesCPU(b *testing.B, pids []int) cpuTime {
	var sum cpuTime
	for _, pid := range pids {
		sum = sum.plus(daemonCPU(b, pid))
	}
	return sum
}

// peerSandbox is a daemon with one sandbox running both upstreams, each
// exposed through the daemon's preview proxy.
type peerSandbox struct {
	d     *harness.Daemon
	ip    string
	hosts map[int]string // preview Host by port
}

func startPeerSandbox(b *testing.B, ctx context.Context, upstream []byte, args []string) peerSandbox {
	d := harness.Start(b, sandpitBin, harness.Options{Args: args})
	c := d.Client()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.WriteFile(ctx, sb.ID, "/tmp/keepalive-upstream", upstream); err != nil {
		b.Fatal(err)
	}
	script := fmt.Sprintf("mkdir -p /tmp/www && head -c 1024 /dev/zero | tr '\\0' x > /tmp/www/f && httpd -p %d -h /tmp/www && "+
		"chmod +x /tmp/keepalive-upstream", peerClosePort)
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, TimeoutS: 30})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("start the upstreams: %v %+v", err, res)
	}
	// An exec ends every process it started when it returns (busybox
	// httpd daemonizes out of it); the engine's detached exec leaves the
	// server running for as long as the sandbox.
	if msg, err := exec.CommandContext(ctx, "docker", "exec", "-d", "sandpit-"+sb.ID,
		"/tmp/keepalive-upstream", "-listen", ":"+strconv.Itoa(peerKeepalivePort)).CombinedOutput(); err != nil {
		b.Fatalf("start the keep-alive upstream: %v %s", err, msg)
	}
	ps := peerSandbox{d: d, ip: sandboxIP(b, d.Network, sb.ID), hosts: map[int]string{}}
	for _, port := range []int{peerClosePort, peerKeepalivePort} {
		web, err := expose(ctx, d, sb.ID, port, "http")
		if err != nil || web.status != http.StatusCreated {
			b.Fatalf("expose %d: %+v %v", port, web, err)
		}
		pub, err := url.Parse(web.port.PublicURL)
		if err != nil {
			b.Fatal(err)
		}
		ps.hosts[port] = pub.Host
	}
	return ps
}

// keepaliveUpstreamBinary builds testdata/keepalive-upstream, static, for
// the sandbox.
func keepaliveUpstreamBinary(b *testing.B) []byte {
	out := filepath.Join(b.TempDir(), "keepalive-upstream")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/keepalive-upstream")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build the keep-alive upstream: %v\n%s", err, msg)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	return bin
}

// peerProcess is a proxy the benchmark runs, stopped by its pid when the
// benchmark ends.
func startPeerProcess(b *testing.B, name string, cmd *exec.Cmd, ports []int) *exec.Cmd {
	var logs strings.Builder
	var mu sync.Mutex
	cmd.Stdout = lockedWriterTo(&mu, &logs)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	for _, port := range ports {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		deadline := time.Now().Add(20 * time.Second)
		for {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-done:
				mu.Lock()
				defer mu.Unlock()
				b.Fatalf("%s exited during start:\n%s", name, logs.String())
			default:
			}
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				b.Fatalf("%s does not listen on %s:\n%s", name, addr, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return cmd
}

// startCaddyPeer runs caddy with one site per upstream, each a
// reverse_proxy to it, on loopback ports of its own.
func startCaddyPeer(b *testing.B, bin string, upstreams []string) *peerSide {
	dir := b.TempDir()
	ports := make([]int, len(upstreams))
	var cf strings.Builder
	// No admin endpoint, no automatic HTTPS, no access log: a plain
	// reverse proxy, as nginx below.
	cf.WriteString("{\n\tadmin off\n\tauto_https off\n}\n")
	for i, up := range upstreams {
		ports[i] = testkit.FreePort(b)
		fmt.Fprintf(&cf, "http://:%d {\n\tbind 127.0.0.1\n\treverse_proxy %s\n}\n", ports[i], up)
	}
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cf.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	cmd = startPeerProcess(b, "caddy", cmd, ports)
	s := &peerSide{name: "caddy", base: "direct", pids: constPids(cmd.Process.Pid)}
	for _, port := range ports {
		s.targets = append(s.targets, loadTarget{url: "http://127.0.0.1:" + strconv.Itoa(port) + "/f"})
	}
	return s
}

// startNginxPeer runs nginx in the foreground with one worker and one
// server per upstream, proxying with kept-alive upstream connections.
func startNginxPeer(b *testing.B, bin string, upstreams []string) *peerSide {
	dir := b.TempDir()
	ports := make([]int, len(upstreams))
	var cf strings.Builder
	fmt.Fprintf(&cf, "daemon off;\nworker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log warn;\n", dir, dir)
	cf.WriteString("events { worker_connections 1024; }\nhttp {\n\taccess_log off;\n")
	for _, tmp := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&cf, "\t%s_temp_path %s/%s;\n", tmp, dir, tmp)
	}
	for i, up := range upstreams {
		ports[i] = testkit.FreePort(b)
		fmt.Fprintf(&cf, "\tupstream u%d { server %s; keepalive 32; }\n", i, up)
		fmt.Fprintf(&cf, "\tserver {\n\t\tlisten 127.0.0.1:%d;\n\t\tlocation / {\n\t\t\tproxy_pass http://u%d;\n\t\t\tproxy_http_version 1.1;\n\t\t\tproxy_set_header Connection \"\";\n\t\t}\n\t}\n", ports[i], i)
	}
	cf.WriteString("}\n")
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(cf.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := startPeerProcess(b, "nginx", exec.Command(bin, "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log")), ports)
	master := cmd.Process.Pid
	s := &peerSide{name: "nginx", base: "direct", pids: func(b *testing.B) []int {
		return append([]int{master}, childPids(b, master)...)
	}}
	for _, port := range ports {
		s.targets = append(s.targets, loadTarget{url: "http://127.0.0.1:" + strconv.Itoa(port) + "/f"})
	}
	return s
}

// childPids lists the processes whose parent is pid (nginx's workers).
func childPids(b *testing.B, pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		s := string(raw)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			kids = append(kids, child)
		}
	}
	return kids
}

// lockedWriterTo serialises a process's stdout and stderr into one log.
func lockedWriterTo(mu *sync.Mutex, w *strings.Builder) *peerLog {
	return &peerLog{mu: mu, w: w}
}

type peerLog struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l *peerLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
