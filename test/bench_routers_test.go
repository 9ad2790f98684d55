package sandpit_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkRouters compares the routers in one run, each with its own daemon
// (and Caddy) on the same machine at the same time:
//
//   - expose-first/http, expose-first/tcp: POST .../ports for a new port (the
//     route written to Caddy, or to the in-process proxy); each exposure is
//     unexposed again, untimed.
//
//   - expose-retry: the same exposure again (Caddy: one GET of the @id).
//
//   - preview: GET of a preview URL served by busybox httpd in the sandbox,
//     over a kept-alive connection to the proxy.
//
//     go test -run '^$' -bench BenchmarkRouters -benchtime 200x ./test/
func BenchmarkRouters(b *testing.B) {
	for _, rc := range routerCases {
		b.Run("router="+rc.name, func(b *testing.B) {
			opts := harness.Options{PortRange: harness.FreeRange(b, 5)}
			var d *harness.Daemon
			if rc.caddy == "" {
				d = harness.Start(b, sandpitBin, opts)
			} else {
				cd := harness.StartCaddy(b, rc.caddy)
				opts.Args = []string{"--router", "caddy", "--caddy-admin", cd.AdminURL()}
				d = harness.Start(b, sandpitBin, opts)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			sb, err := d.Client().Create(ctx, client.CreateRequest{})
			if err != nil {
				b.Fatal(err)
			}
			id := sb.ID
			res, err := d.Client().Exec(ctx, id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "mkdir -p /tmp/www && printf bench > /tmp/www/index.html && httpd -p 8080 -h /tmp/www"}, TimeoutS: 30})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("httpd: %v %+v", err, res)
			}

			for _, protocol := range []string{"http", "tcp"} {
				b.Run("expose-first/"+protocol, func(b *testing.B) {
					lat := make([]time.Duration, 0, b.N)
					b.ResetTimer()
					for i := range b.N {
						port := 20000 + i%1000
						start := time.Now()
						r, err := expose(ctx, d, id, port, protocol)
						lat = append(lat, time.Since(start))
						if err != nil || r.status != http.StatusCreated {
							b.Fatalf("expose %d: %d %s %v", port, r.status, r.msg, err)
						}
						b.StopTimer()
						status, _, msg, err := postJSON(ctx, d, http.MethodDelete, "/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(port), "", nil)
						if err != nil || status != http.StatusNoContent {
							b.Fatalf("unexpose %d: %d %s %v", port, status, msg, err)
						}
						b.StartTimer()
					}
					harness.ReportPercentiles(b, "", lat)
				})
			}
			web, err := expose(ctx, d, id, 8080, "http")
			if err != nil || web.status != http.StatusCreated {
				b.Fatalf("expose 8080: %+v %v", web, err)
			}
			b.Run("expose-retry", func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					start := time.Now()
					r, err := expose(ctx, d, id, 8080, "http")
					lat = append(lat, time.Since(start))
					if err != nil || r.status != http.StatusOK {
						b.Fatalf("retry: %d %s %v", r.status, r.msg, err)
					}
				}
				harness.ReportPercentiles(b, "", lat)
			})
			b.Run("preview", func(b *testing.B) {
				u, _ := url.Parse(web.port.PublicURL)
				hc := &http.Client{Timeout: 10 * time.Second}
				get := func() error {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.ProxyAddr+"/", nil)
					req.Host = u.Host
					resp, err := hc.Do(req)
					if err != nil {
						return err
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						return &statusError{resp.StatusCode}
					}
					return nil
				}
				deadline := time.Now().Add(10 * time.Second)
				for get() != nil && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					start := time.Now()
					if err := get(); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				harness.ReportPercentiles(b, "", lat)
			})
		})
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "status " + strconv.Itoa(e.code) }
