package sandpit_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkPreviewTLS compares preview requests on the builtin router over
// plain HTTP (--tls off) and HTTPS (--tls internal): two daemons, each
// serving busybox httpd in a sandbox, and every iteration makes one request
// to each, alternating, so the load of this shared machine falls on both
// sides alike:
//
//   - keepalive: GETs over kept-alive connections (HTTP/1.1 both ways);
//   - new-conn: a new connection per request, so HTTPS pays a full
//     handshake (and the per-handshake certificate decision) every time.
//
// Each side reports p50/p95/p99 and requests per second (of its own time).
//
//	go test -run '^$' -bench BenchmarkPreviewTLS -benchtime 1000x ./test/
func BenchmarkPreviewTLS(b *testing.B) {
	const domain = "sandpit.test"
	type side struct {
		name string
		url  string
		d    *harness.Daemon
		conf *tls.Config
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var sides []*side
	for _, mode := range []string{"off", "internal"} {
		d := harness.Start(b, sandpitBin, harness.Options{PortRange: harness.FreeRange(b, 5), Args: []string{"--tls", mode, "--domain", domain}})
		c := d.Client()
		sb, err := c.Create(ctx, client.CreateRequest{})
		if err != nil {
			b.Fatal(err)
		}
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "mkdir -p /tmp/www && printf bench > /tmp/www/index.html && httpd -p 8080 -h /tmp/www"}, TimeoutS: 30})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("httpd: %v %+v", err, res)
		}
		web, err := expose(ctx, d, sb.ID, 8080, "http")
		if err != nil || web.status != http.StatusCreated {
			b.Fatalf("expose 8080: %+v %v", web, err)
		}
		s := &side{name: map[string]string{"off": "http", "internal": "https"}[mode], url: web.port.PublicURL + "/", d: d}
		if mode != "off" {
			pem, err := os.ReadFile(filepath.Join(d.DataDir, "tls", "ca.crt"))
			if err != nil {
				b.Fatal(err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			s.conf = &tls.Config{RootCAs: pool}
		}
		sides = append(sides, s)
	}
	for _, keep := range []bool{true, false} {
		name := "keepalive"
		if !keep {
			name = "new-conn"
		}
		b.Run(name, func(b *testing.B) {
			gets := make([]func() error, len(sides))
			for i, s := range sides {
				dialer := &net.Dialer{Timeout: 5 * time.Second}
				hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
					TLSClientConfig:   s.conf,
					DisableKeepAlives: !keep,
					DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
						return dialer.DialContext(ctx, network, s.d.ProxyAddr)
					},
				}}
				gets[i] = func() error {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
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
				for gets[i]() != nil && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
			}
			lat := make([][]time.Duration, len(sides))
			spent := make([]time.Duration, len(sides))
			b.ResetTimer()
			for range b.N {
				for i, get := range gets {
					start := time.Now()
					if err := get(); err != nil {
						b.Fatal(err)
					}
					took := time.Since(start)
					lat[i] = append(lat[i], took)
					spent[i] += took
				}
			}
			for i, s := range sides {
				b.ReportMetric(float64(b.N)/spent[i].Seconds(), s.name+"-req/s")
				harness.ReportPercentiles(b, s.name, lat[i])
			}
		})
	}
}
