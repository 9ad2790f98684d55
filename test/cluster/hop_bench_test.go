package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkClusterHop measures the cost of reaching a sandbox through a node
// that does not run it: a preview GET (busybox httpd's static page) through
// the owner's proxy and through another node's proxy, and an exec (echo)
// through the owner's API and through another node's API, all against one
// sandbox in one run so the figures compare. Run with -benchtime=50x.
func BenchmarkClusterHop(b *testing.B) {
	c := startCluster(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	owner, other := c.nodes[2], c.nodes[0]
	sb := placeOn(b, ctx, other, owner.name, "hop")
	res, err := owner.Client().Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "mkdir -p /tmp/www && printf hop > /tmp/www/index.html && httpd -p 8080 -h /tmp/www"}, TimeoutS: 30})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("httpd: %+v %v", res, err)
	}
	if _, err := owner.Client().ExposePort(ctx, sb.ID, 8080, "http"); err != nil {
		b.Fatal(err)
	}
	host := sb.ID + "-8080.localhost"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc.CloseIdleConnections()
	preview := func(n *node) func() error {
		return func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.ProxyAddr+"/", nil)
			if err != nil {
				return err
			}
			req.Host = host
			res, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil || res.StatusCode != 200 || string(body) != "hop" {
				return &hopError{res.StatusCode, string(body), err}
			}
			return nil
		}
	}
	execVia := func(n *node) func() error {
		cl := n.Client()
		return func() error {
			r, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo", Args: []string{"hop"}})
			if err != nil || r.ExitCode != 0 || r.Stdout != "hop\n" {
				return &hopError{r.ExitCode, r.Stdout, err}
			}
			return nil
		}
	}
	for _, bc := range []struct {
		name string
		op   func() error
	}{
		{"preview-via-owner", preview(owner)},
		{"preview-via-other", preview(other)},
		{"exec-via-owner", execVia(owner)},
		{"exec-via-other", execVia(other)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// One untimed call opens the connections (client to node, node
			// to owner) that the timed ones reuse.
			if err := bc.op(); err != nil {
				b.Fatal(err)
			}
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := bc.op(); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
			}
			b.StopTimer()
			harness.ReportPercentiles(b, "", samples)
		})
	}
}

// hopError is a benchmark call's unexpected answer.
type hopError struct {
	code int
	body string
	err  error
}

func (e *hopError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("unexpected answer %d: %q", e.code, e.body)
}
