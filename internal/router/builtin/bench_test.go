package builtin_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
)

// BenchmarkHandler is the proxy handler alone, in process: clients keep
// their connections to the proxy, and the upstream either closes every
// connection after its 1 KiB answer, as busybox httpd does, or keeps it, as
// the sandbox's agent and most application servers do. It shows what the
// proxy costs per request in CPU and allocations (the black-box
// BenchmarkPreviewProxy in test/ measures the whole daemon):
//
//	go test -run '^$' -bench BenchmarkHandler -benchmem -cpuprofile /tmp/cpu.out ./internal/router/builtin/
func BenchmarkHandler(b *testing.B) {
	for _, upstream := range []string{"close", "keepalive"} {
		b.Run("upstream="+upstream, func(b *testing.B) { benchHandler(b, upstream == "close") })
	}
}

func benchHandler(b *testing.B, closing bool) {
	body := strings.Repeat("x", 1024)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if closing {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, body)
	}))
	defer up.Close()
	rt := builtin.New(builtin.Options{Domain: "example.test", DaemonCredential: func(v string) bool { return strings.HasPrefix(v, "sp_") }})
	defer rt.Close()
	if err := rt.Install(context.Background(), router.Route{Kind: router.KindHTTP, SandboxID: "sbone", Port: 8080, Upstream: up.Listener.Addr().String()}); err != nil {
		b.Fatal(err)
	}
	proxy := httptest.NewServer(rt.Handler())
	defer proxy.Close()

	b.ReportAllocs()
	b.SetParallelism(4) // 8 clients on 2 cores
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
		defer hc.CloseIdleConnections()
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodGet, proxy.URL+"/f", nil)
			req.Host = "sbone-8080.example.test"
			req.Header.Set("User-Agent", "bench")
			resp, err := hc.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || n != 1024 {
				b.Errorf("status %d, %d bytes", resp.StatusCode, n)
				return
			}
		}
	})
	b.StopTimer()
	// The whole process: the clients and the upstream as well as the
	// proxy, which the comparison of two builds still shows.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
