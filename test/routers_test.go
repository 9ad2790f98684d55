package sandpit_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// routerCase is one router the exposure tests run against: the builtin
// proxy, or Caddy (Debian's 2.6, or a build with caddy-l4) configured by
// sandpit through the admin API.
type routerCase struct {
	name  string
	caddy harness.CaddyFlavor // "" for the builtin router
}

var routerCases = []routerCase{
	{name: "builtin"},
	{name: "caddy", caddy: harness.CaddyDebian},
	{name: "caddy-l4", caddy: harness.CaddyL4},
}

// startRouted starts a daemon with the case's router, and the Caddy it
// configures (nil for builtin). extra are more serve flags.
func startRouted(t *testing.T, rc routerCase, opts harness.Options, extra ...string) (*harness.Daemon, *harness.Caddy) {
	t.Helper()
	if rc.caddy == "" {
		opts.Args = append(opts.Args, extra...)
		return harness.Start(t, sandpitBin, opts), nil
	}
	cd := harness.StartCaddy(t, rc.caddy)
	opts.Args = append(append(opts.Args, "--router", "caddy", "--caddy-admin", cd.AdminURL()), extra...)
	return harness.Start(t, sandpitBin, opts), cd
}

// caddyObjects counts the objects in Caddy whose @id is id: routes of
// sandpit's HTTP server and layer4 servers.
func caddyObjects(t *testing.T, cd *harness.Caddy, id string) int {
	t.Helper()
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []map[string]any `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
			Layer4 struct {
				Servers map[string]map[string]any `json:"servers"`
			} `json:"layer4"`
		} `json:"apps"`
	}
	if _, err := cd.Admin(http.MethodGet, "/config/", nil, &cfg); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range cfg.Apps.HTTP.Servers {
		for _, r := range s.Routes {
			if r["@id"] == id {
				n++
			}
		}
	}
	for _, s := range cfg.Apps.Layer4.Servers {
		if s["@id"] == id {
			n++
		}
	}
	return n
}

// TestRouters runs the exposure acceptance checks against every router: an
// HTTP preview in both host forms, a custom domain, a TCP echo (through
// caddy-l4's layer4 app when Caddy has it, else through sandpit's own
// listener), retries that make one route and hold one host port, and removal.
func TestRouters(t *testing.T) {
	t.Parallel()
	for _, rc := range routerCases {
		t.Run("router="+rc.name, func(t *testing.T) {
			t.Parallel()
			d, cd := startRouted(t, rc, harness.Options{PortRange: harness.FreeRange(t, 3)})
			c := d.Client()
			ctx := ctxFor(t, 3*time.Minute)
			id := newSandbox(t, ctx, c)
			startHTTPD(t, ctx, c, id, 8080, "hello via "+rc.name)
			startEcho(t, ctx, c, id, 9000)

			// HTTP preview, both host forms.
			web := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
			if want := "http://" + id + "-8080.localhost:" + proxyPort(t, d); web.PublicURL != want {
				t.Fatalf("public_url = %q, want %q", web.PublicURL, want)
			}
			testkit.Eventually(t, 10*time.Second, "preview", func() error { return servesPage(ctx, d, web.PublicURL, "hello via "+rc.name) })
			if err := servesPage(ctx, d, "http://8080-"+id+".localhost:"+proxyPort(t, d), "hello via "+rc.name); err != nil {
				t.Fatal(err)
			}
			if status, _, err := proxyGet(ctx, d, "http://"+id+"-8081.localhost:"+proxyPort(t, d)); err != nil || status != http.StatusNotFound {
				t.Fatalf("unexposed port: %d %v, want 404", status, err)
			}

			// Custom domain.
			host := "app-" + rc.name + ".example.test"
			status, dom, code, err := addDomain(ctx, d, id, host, 8080)
			if err != nil || status != http.StatusCreated {
				t.Fatalf("add domain: %d %s %v", status, code, err)
			}
			testkit.Eventually(t, 10*time.Second, "custom domain", func() error { return servesPage(ctx, d, dom.URL, "hello via "+rc.name) })

			// TCP echo.
			echo := mustExpose(t, ctx, d, id, 9000, "tcp", http.StatusCreated)
			testkit.Eventually(t, 10*time.Second, "tcp echo", func() error { return echoes(tcpAddr(t, echo.PublicURL), "ping") })
			switch rc.caddy {
			case harness.CaddyL4:
				if n := caddyObjects(t, cd, "sandpit_tcp_"+strconv.Itoa(echo.HostPort)+"_"+id+"_9000"); n != 1 {
					t.Fatalf("%d layer4 servers for the tcp forward, want 1", n)
				}
			case harness.CaddyDebian:
				if !strings.Contains(d.Logs(), "sandpit serves TCP forwards itself") {
					t.Fatal("the daemon did not say that it serves TCP forwards itself")
				}
			}

			// 50 sequential and 24 concurrent exposes of one port: one
			// new answer, one route, one host port.
			for _, tc := range []struct {
				port     int
				protocol string
			}{{8082, "http"}, {9001, "tcp"}} {
				first := exposeRepeatedly(t, ctx, d, id, tc.port, tc.protocol, 50, 24)
				if cd != nil {
					objID := "sandpit_http_" + id + "_" + strconv.Itoa(tc.port)
					if tc.protocol == "tcp" {
						objID = "sandpit_tcp_" + strconv.Itoa(first.HostPort) + "_" + id + "_" + strconv.Itoa(tc.port)
					}
					want := 1
					if tc.protocol == "tcp" && rc.caddy == harness.CaddyDebian {
						want = 0 // sandpit's own listener, not Caddy's
					}
					if n := caddyObjects(t, cd, objID); n != want {
						t.Fatalf("%d Caddy objects %s, want %d", n, objID, want)
					}
				}
			}
			// The pool holds three host ports: 9000 and 9001 took two, so
			// one more tcp exposure fits and the next does not.
			mustExpose(t, ctx, d, id, 9002, "tcp", http.StatusCreated)
			if r, err := expose(ctx, d, id, 9003, "tcp"); err != nil || r.status != http.StatusServiceUnavailable {
				t.Fatalf("exposure past the pool: %+v %v, want 503", r, err)
			}

			// Removal: each route goes, exactly. A domain rides on its
			// port's exposure, so the port cannot be unexposed under it
			// (409, both routes intact) until the domain is removed.
			if err := c.UnexposePort(ctx, id, 8080); apiCode(err) != "conflict" {
				t.Fatalf("unexposing a port a domain targets: %v, want 409 conflict", err)
			}
			if err := servesPage(ctx, d, web.PublicURL, "hello via "+rc.name); err != nil {
				t.Fatalf("preview after the refused unexpose: %v", err)
			}
			if err := c.RemoveDomain(ctx, id, host); err != nil {
				t.Fatal(err)
			}
			if status, _, err := proxyGet(ctx, d, dom.URL); err != nil || status != http.StatusNotFound {
				t.Fatalf("domain after removal: %d %v, want 404", status, err)
			}
			if err := servesPage(ctx, d, web.PublicURL, "hello via "+rc.name); err != nil {
				t.Fatalf("preview after removing the domain: %v", err)
			}
			if err := c.UnexposePort(ctx, id, 8080); err != nil {
				t.Fatal(err)
			}
			if status, _, err := proxyGet(ctx, d, web.PublicURL); err != nil || status != http.StatusNotFound {
				t.Fatalf("preview after unexpose: %d %v, want 404", status, err)
			}
			if err := c.UnexposePort(ctx, id, 9000); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, "host port closed after unexpose", func() error {
				conn, err := net.DialTimeout("tcp", tcpAddr(t, echo.PublicURL), time.Second)
				if err == nil {
					conn.Close()
					return fmt.Errorf("host port %d still accepts", echo.HostPort)
				}
				return nil
			})
			if cd != nil {
				for _, objID := range []string{"sandpit_http_" + id + "_8080", "sandpit_domain_" + id + "_" + host} {
					if n := caddyObjects(t, cd, objID); n != 0 {
						t.Fatalf("%s still in Caddy after removal", objID)
					}
				}
			}

			// Deleting the sandbox removes the rest of its routes (the
			// agent's, 8082, the tcp forwards), and only those.
			if err := c.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			if cd != nil {
				for _, objID := range []string{"sandpit_http_" + id + "_49983", "sandpit_http_" + id + "_8082"} {
					if n := caddyObjects(t, cd, objID); n != 0 {
						t.Fatalf("%s still in Caddy after the sandbox was deleted", objID)
					}
				}
				if n := caddyObjects(t, cd, "sandpit_fallback"); n != 1 {
					t.Fatalf("%d fallback routes after the delete, want 1", n)
				}
			}
		})
	}
}

// exposeRepeatedly exposes one port sequential times in a row, then
// concurrent times at once, and checks the answers: only the first is new
// (201, reused false), every other is a retry (200, reused true), and all
// carry the same URL and host port. It returns the first.
func exposeRepeatedly(t *testing.T, ctx context.Context, d *harness.Daemon, id string, port int, protocol string, sequential, concurrent int) client.Port {
	t.Helper()
	answers := make([]exposeResp, 0, sequential+concurrent)
	for range sequential {
		r, err := expose(ctx, d, id, port, protocol)
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, r)
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for range concurrent {
		wg.Go(func() {
			r, err := expose(ctx, d, id, port, protocol)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			answers = append(answers, r)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(answers) != sequential+concurrent {
		t.Fatalf("%d answers, want %d", len(answers), sequential+concurrent)
	}
	first := answers[0].port
	fresh := 0
	for i, r := range answers {
		switch {
		case r.status == http.StatusCreated && !r.port.Reused:
			fresh++
		case r.status == http.StatusOK && r.port.Reused:
		default:
			t.Fatalf("%s answer %d: %d %+v (%s)", protocol, i, r.status, r.port, r.msg)
		}
		if r.port.PublicURL != first.PublicURL || r.port.HostPort != first.HostPort {
			t.Fatalf("%s answer %d = %s host port %d, first was %s host port %d",
				protocol, i, r.port.PublicURL, r.port.HostPort, first.PublicURL, first.HostPort)
		}
	}
	if fresh != 1 || answers[0].status != http.StatusCreated {
		t.Fatalf("%s: %d answers were new (first %d), want exactly the first", protocol, fresh, answers[0].status)
	}
	return first
}
