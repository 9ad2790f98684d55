package service_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
)

// faultyRouter is the builtin router with one injected fault: while failing
// is set, or when the hook returns an error, Install fails without touching
// the routes. Everything else, and every route it does install, is the real
// builtin router carrying real traffic.
type faultyRouter struct {
	*builtin.Builtin
	failing atomic.Bool
	fails   atomic.Int64
	// hook, when set, runs before each Install; it may block to hold an
	// install in flight.
	hook atomic.Pointer[func(router.Route) error]
}

var errInjected = errors.New("injected router fault")

func (f *faultyRouter) Install(ctx context.Context, r router.Route) error {
	if h := f.hook.Load(); h != nil {
		if err := (*h)(r); err != nil {
			f.fails.Add(1)
			return err
		}
	}
	if f.failing.Load() {
		f.fails.Add(1)
		return fmt.Errorf("install %s: %w", r.Key(), errInjected)
	}
	return f.Builtin.Install(ctx, r)
}

// rig is a service on a real store, the real Docker runtime and the
// builtin router (behind faultyRouter), with the builtin's HTTP proxy
// served on a loopback port.
type rig struct {
	svc       *service.Service
	st        *store.Store
	rtr       *faultyRouter
	proxyAddr string
	pool      sandpit.PortRange
}

// buildSandpit compiles the sandpit binary, which is also the in-sandbox
// agent, statically so that it runs in the busybox test image.
func buildSandpit(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sandpit")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sandpit")
	cmd.Dir = testenv.ModuleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func newRig(t testing.TB) *rig {
	t.Helper()
	image := testenv.TestImage(t)
	labels := testenv.RunLabel(t)
	bin := buildSandpit(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}

	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt, err := docker.New(ctx, docker.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	rtr := &faultyRouter{Builtin: builtin.New(builtin.Options{Domain: "localhost", TCPBindHost: "127.0.0.1", Logger: log})}
	t.Cleanup(func() { rtr.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rtr.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	var inst [8]byte
	_, _ = rand.Read(inst[:])
	// A pool of one host port, free a moment ago, makes "no host port
	// consumed" something the next exposure can prove.
	hp := testkit.FreePort(t)
	pool := sandpit.PortRange{Lo: hp, Hi: hp}
	svc := service.New(service.Config{
		DefaultImage: image,
		AgentBinary:  bin,
		Domain:       "localhost",
		ProxyPort:    ln.Addr().(*net.TCPAddr).Port,
		PublicHost:   "127.0.0.1",
		PortRange:    pool,
		ExtraLabels:  labels,
		Instance:     hex.EncodeToString(inst[:]),
		Logger:       log,
	}, st, rt, rtr)
	return &rig{svc: svc, st: st, rtr: rtr, proxyAddr: ln.Addr().String(), pool: pool}
}

// sandbox creates a sandbox running a page on 8080 (busybox httpd) and a TCP
// echo on 9000 (busybox nc, one cat per connection).
func (r *rig) sandbox(t *testing.T, ctx context.Context) string {
	t.Helper()
	sb, err := r.svc.CreateSandbox(ctx, service.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.svc.DeleteSandbox(context.Background(), sb.ID); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
			t.Errorf("delete sandbox: %v", err)
		}
	})
	script := "mkdir -p /tmp/www && printf 'page of %s' " + sb.ID + " > /tmp/www/index.html && httpd -p 8080 -h /tmp/www && " +
		"{ nc -ll -p 9000 -e cat </dev/null >/dev/null 2>&1 & }"
	res, err := r.svc.Exec(ctx, sb.ID, service.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start servers: %v exit %d %s", err, res.ExitCode, res.Stderr)
	}
	return sb.ID
}

// serves sends real traffic through the route of p: an HTTP GET through the
// builtin proxy for http, bytes through the host port for tcp.
func (r *rig) serves(p sandpit.ExposedPort) error {
	if p.Protocol == service.ProtoTCP {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(p.PublicURL, "tcp://"), 3*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "echo me\n"); err != nil {
			return err
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || line != "echo me\n" {
			return fmt.Errorf("echo through %s: %q %v", p.PublicURL, line, err)
		}
		return nil
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+r.proxyAddr+"/", nil)
	if err != nil {
		return err
	}
	req.Host = strings.TrimPrefix(p.PublicURL, "http://")
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := "page of " + p.SandboxID; resp.StatusCode != http.StatusOK || string(body) != want {
		return fmt.Errorf("GET %s: %d %q, want 200 %q", p.PublicURL, resp.StatusCode, body, want)
	}
	return nil
}

func routeOf(t *testing.T, r *rig, id string, port int) (router.Route, bool) {
	t.Helper()
	routes, err := r.rtr.Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range routes {
		if rt.SandboxID == id && rt.Port == port && rt.Kind != router.KindDomain {
			return rt, true
		}
	}
	return router.Route{}, false
}

// TestExposeRollbackOnRouterFailure injects router failures into ExposePort.
// A failed install of a new exposure must undo the row and give back the
// host port (the pool holds one, so the next exposure proves it); a failed
// install while retrying an existing exposure must leave that exposure, its
// row and its route, alone and serving, since another call installed it.
func TestExposeRollbackOnRouterFailure(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := r.sandbox(t, ctx)

	cases := []struct {
		protocol string
		port     int
	}{
		{service.ProtoTCP, 9000},
		{service.ProtoHTTP, 8080},
	}
	for _, tc := range cases {
		t.Run(tc.protocol, func(t *testing.T) {
			// A new exposure whose install fails leaves nothing behind.
			inUse, err := r.st.CountHostPortsInRange(ctx, r.pool)
			if err != nil {
				t.Fatal(err)
			}
			r.rtr.failing.Store(true)
			_, err = r.svc.ExposePort(ctx, id, tc.port, tc.protocol)
			r.rtr.failing.Store(false)
			if !errors.Is(err, service.ErrRouter) || !strings.Contains(err.Error(), errInjected.Error()) {
				t.Fatalf("expose with a failing router: %v, want ErrRouter", err)
			}
			if _, err := r.st.GetPort(ctx, id, tc.port); !errors.Is(err, sandpit.ErrNotFound) {
				t.Fatalf("row after a failed new exposure: %v, want none", err)
			}
			if n, err := r.st.CountHostPortsInRange(ctx, r.pool); err != nil || n != inUse {
				t.Fatalf("host ports in use after a failed new exposure: %d %v, want %d as before", n, err, inUse)
			}
			if _, ok := routeOf(t, r, id, tc.port); ok {
				t.Fatal("a route is installed after a failed new exposure")
			}

			// With the router healthy the same call makes the exposure, on
			// the pool's one host port for tcp.
			res, err := r.svc.ExposePort(ctx, id, tc.port, tc.protocol)
			if err != nil || res.Reuse {
				t.Fatalf("expose: %+v %v, want a new exposure", res, err)
			}
			if tc.protocol == service.ProtoTCP && res.Port.HostPort != r.pool.Lo {
				t.Fatalf("host port %d, want the pool's only port %d", res.Port.HostPort, r.pool.Lo)
			}
			testkit.Eventually(t, 10*time.Second, "traffic through the new exposure", func() error { return r.serves(res.Port) })

			// A retry whose install fails keeps the existing exposure.
			r.rtr.failing.Store(true)
			before := r.rtr.fails.Load()
			_, err = r.svc.ExposePort(ctx, id, tc.port, tc.protocol)
			r.rtr.failing.Store(false)
			if !errors.Is(err, service.ErrRouter) || r.rtr.fails.Load() != before+1 {
				t.Fatalf("retry with a failing router: %v, want ErrRouter from the injected fault", err)
			}
			row, err := r.st.GetPort(ctx, id, tc.port)
			if err != nil || row.HostPort != res.Port.HostPort || row.PublicURL != res.Port.PublicURL {
				t.Fatalf("row after a failed retry: %+v %v, want %+v", row, err, res.Port)
			}
			if _, ok := routeOf(t, r, id, tc.port); !ok {
				t.Fatal("the route is gone after a failed retry")
			}
			if err := r.serves(row); err != nil {
				t.Fatalf("traffic after a failed retry: %v", err)
			}
			// And a healthy retry is a retry.
			again, err := r.svc.ExposePort(ctx, id, tc.port, tc.protocol)
			if err != nil || !again.Reuse || again.Port.HostPort != res.Port.HostPort {
				t.Fatalf("healthy retry: %+v %v", again, err)
			}
		})
	}
}

// TestExposeRetryFailureDoesNotUndoInFlightExposure is the race the reused
// flag exists for: the first call has inserted the row and is still
// installing its route when a retry arrives. Calls on one sandbox are
// serialised, so the retry waits for the first to finish; it then finds the
// row (reused) and fails its own install, and must not delete the row: the
// first call's exposure keeps serving.
func TestExposeRetryFailureDoesNotUndoInFlightExposure(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := r.sandbox(t, ctx)

	entered := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int64
	hook := func(rt router.Route) error {
		if rt.SandboxID != id || rt.Port != 9000 {
			return nil
		}
		switch calls.Add(1) {
		case 1: // the first call: hold its install in flight
			close(entered)
			<-release
			return nil
		default: // the retry: fail
			return errInjected
		}
	}
	r.rtr.hook.Store(&hook)
	defer r.rtr.hook.Store(nil)

	type result struct {
		res service.ExposeResult
		err error
	}
	first := make(chan result, 1)
	go func() {
		res, err := r.svc.ExposePort(ctx, id, 9000, service.ProtoTCP)
		first <- result{res, err}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the first exposure never reached the router")
	}
	retry := make(chan error, 1)
	go func() {
		_, err := r.svc.ExposePort(ctx, id, 9000, service.ProtoTCP)
		retry <- err
	}()
	select {
	case err := <-retry:
		t.Fatalf("the retry ran beside the first call (err %v): calls on one sandbox must be serialised", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	got := <-first
	if got.err != nil || got.res.Reuse {
		t.Fatalf("first exposure: %+v %v, want a new exposure", got.res, got.err)
	}
	if err := <-retry; !errors.Is(err, service.ErrRouter) {
		t.Fatalf("retry with a failing install: %v, want ErrRouter", err)
	}
	row, err := r.st.GetPort(ctx, id, 9000)
	if err != nil || row.HostPort != got.res.Port.HostPort {
		t.Fatalf("the retry's failure removed the first call's row: %+v %v, want %+v", row, err, got.res.Port)
	}
	testkit.Eventually(t, 10*time.Second, "traffic through the exposure", func() error { return r.serves(row) })
}

// TestExposeRollbackKeepsRowARetryInstalled is the other order of the same
// race: the first call inserts the row and its install is held; a retry
// arrives meanwhile; then the first install fails (a router in another
// process refused it). Lifecycle calls on one sandbox are serialised, so the
// retry waits for the first call instead of answering success for a row the
// first call then rolls back: the first answers ErrRouter and removes only
// what it made, and the retry then makes the exposure afresh, so the
// success it answers is true in the final state.
func TestExposeRollbackKeepsRowARetryInstalled(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := r.sandbox(t, ctx)

	for _, protocol := range []string{service.ProtoTCP, service.ProtoHTTP} {
		t.Run(protocol, func(t *testing.T) {
			port := 9100
			if protocol == service.ProtoHTTP {
				port = 8100
			}
			entered := make(chan struct{})
			release := make(chan struct{})
			var calls atomic.Int64
			hook := func(rt router.Route) error {
				if rt.SandboxID != id || rt.Port != port {
					return nil
				}
				switch calls.Add(1) {
				case 1: // the first call: held, then refused
					close(entered)
					<-release
					return errInjected
				default: // the retry: installs
					return nil
				}
			}
			r.rtr.hook.Store(&hook)
			defer r.rtr.hook.Store(nil)

			type result struct {
				res service.ExposeResult
				err error
			}
			first := make(chan result, 1)
			go func() {
				res, err := r.svc.ExposePort(ctx, id, port, protocol)
				first <- result{res, err}
			}()
			<-entered
			retry := make(chan result, 1)
			go func() {
				res, err := r.svc.ExposePort(ctx, id, port, protocol)
				retry <- result{res, err}
			}()
			// Give the retry every chance to overtake the held call; it must
			// not answer while the first call is undecided.
			time.Sleep(100 * time.Millisecond)
			select {
			case got := <-retry:
				t.Fatalf("the retry answered %+v %v while the first call was still installing", got.res, got.err)
			default:
			}
			close(release)
			if got := <-first; !errors.Is(got.err, service.ErrRouter) {
				t.Fatalf("first call: %+v %v, want ErrRouter", got.res, got.err)
			}
			again := <-retry
			if again.err != nil || again.res.Reuse {
				t.Fatalf("retry: %+v %v, want a fresh exposure after the first call's rollback", again.res, again.err)
			}
			row, err := r.st.GetPort(ctx, id, port)
			if err != nil || row.HostPort != again.res.Port.HostPort {
				t.Fatalf("row: %+v %v, want the retry's %+v", row, err, again.res.Port)
			}
			if _, ok := routeOf(t, r, id, port); !ok {
				t.Fatal("the retry's route is missing")
			}
		})
	}
}

// TestCustomDomainRollbackOnRouterFailure is the same property for custom
// domains: a failed install of a new binding frees the hostname, a failed
// install while repeating an existing one keeps it serving.
func TestCustomDomainRollbackOnRouterFailure(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := r.sandbox(t, ctx)
	const host = "rollback.example.test"
	viaHost := sandpit.ExposedPort{SandboxID: id, Protocol: service.ProtoHTTP, PublicURL: "http://" + host}
	// A domain targets an exposed port only.
	if _, err := r.svc.ExposePort(ctx, id, 8080, service.ProtoHTTP); err != nil {
		t.Fatal(err)
	}

	r.rtr.failing.Store(true)
	_, _, err := r.svc.AddCustomDomain(ctx, id, host, 8080)
	r.rtr.failing.Store(false)
	if !errors.Is(err, service.ErrRouter) {
		t.Fatalf("add with a failing router: %v, want ErrRouter", err)
	}
	if _, err := r.st.GetCustomDomain(ctx, host); !errors.Is(err, sandpit.ErrNotFound) {
		t.Fatalf("binding after a failed add: %v, want none", err)
	}

	d, added, err := r.svc.AddCustomDomain(ctx, id, host, 8080)
	if err != nil || !added {
		t.Fatalf("add: %+v %v %v", d, added, err)
	}
	testkit.Eventually(t, 10*time.Second, "traffic through the custom domain", func() error { return r.serves(viaHost) })

	r.rtr.failing.Store(true)
	_, _, err = r.svc.AddCustomDomain(ctx, id, host, 8080)
	r.rtr.failing.Store(false)
	if !errors.Is(err, service.ErrRouter) {
		t.Fatalf("repeat with a failing router: %v, want ErrRouter", err)
	}
	if got, err := r.st.GetCustomDomain(ctx, host); err != nil || got != d {
		t.Fatalf("binding after a failed repeat: %+v %v, want %+v", got, err, d)
	}
	if err := r.serves(viaHost); err != nil {
		t.Fatalf("traffic after a failed repeat: %v", err)
	}
}

// TestExposeWhilePausedServesAfterResume exposes a port of a paused
// sandbox: the exposure is recorded then, and its route must be installed
// when the sandbox resumes.
func TestExposeWhilePausedServesAfterResume(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := r.sandbox(t, ctx)
	if _, err := r.svc.PauseSandbox(ctx, id, sandpit.PauseMemory); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		protocol string
		port     int
	}{
		{service.ProtoTCP, 9000},
		{service.ProtoHTTP, 8080},
	}
	var ports []sandpit.ExposedPort
	for _, tc := range cases {
		res, err := r.svc.ExposePort(ctx, id, tc.port, tc.protocol)
		if err != nil || res.Reuse {
			t.Fatalf("expose %s while paused: %+v %v", tc.protocol, res, err)
		}
		ports = append(ports, res.Port)
	}
	if _, err := r.svc.ResumeSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		testkit.Eventually(t, 10*time.Second, p.Protocol+" "+strconv.Itoa(p.Port)+" after resume", func() error { return r.serves(p) })
	}
}
