package sandpit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkPause times pause and resume of one sandbox through /v1, in both
// modes: a filesystem pause (the container stopped) and its resume (the
// container booted again, until its agent answers), and a memory pause
// (the freezer) and its resume. It reports the percentiles of each. Run
// with -benchtime=10x.
func BenchmarkPause(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	var fsPause, fsResume, memPause, memResume []time.Duration
	timed := func(out *[]time.Duration, fn func() (client.Sandbox, error)) {
		start := time.Now()
		if _, err := fn(); err != nil {
			b.Fatal(err)
		}
		*out = append(*out, time.Since(start))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		timed(&fsPause, func() (client.Sandbox, error) { return c.Pause(ctx, sb.ID, "filesystem") })
		timed(&fsResume, func() (client.Sandbox, error) { return c.Resume(ctx, sb.ID) })
		timed(&memPause, func() (client.Sandbox, error) { return c.Pause(ctx, sb.ID, "memory") })
		timed(&memResume, func() (client.Sandbox, error) { return c.Resume(ctx, sb.ID) })
	}
	b.StopTimer()
	harness.ReportPercentiles(b, "fs-pause", fsPause)
	harness.ReportPercentiles(b, "fs-resume", fsResume)
	harness.ReportPercentiles(b, "mem-pause", memPause)
	harness.ReportPercentiles(b, "mem-resume", memResume)
}

// BenchmarkAutoResume times the first request through the preview URL of a
// paused sandbox made with auto_resume: from the request until its answer,
// which includes the resume. Memory pauses (the server keeps running) and,
// for comparison, the same request to the running sandbox. Run with
// -benchtime=10x.
func BenchmarkAutoResume(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Lifecycle: &client.Lifecycle{OnTimeout: "pause", KeepMemory: true, AutoResume: true}})
	if err != nil {
		b.Fatal(err)
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "mkdir -p /tmp/www && echo up > /tmp/www/index.html && httpd -p 8080 -h /tmp/www"}})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("httpd: %v %d", err, res.ExitCode)
	}
	p, err := c.ExposePort(ctx, sb.ID, 8080, "http")
	if err != nil {
		b.Fatal(err)
	}
	get := func() time.Duration {
		start := time.Now()
		status, _, err := proxyGet(ctx, d, p.PublicURL)
		if err != nil || status != http.StatusOK {
			b.Fatalf("preview: %d %v", status, err)
		}
		return time.Since(start)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if status, _, err := proxyGet(ctx, d, p.PublicURL); err == nil && status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the preview never answered")
		}
	}
	var first, warm []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Pause(ctx, sb.ID, "memory"); err != nil {
			b.Fatal(err)
		}
		first = append(first, get())
		warm = append(warm, get())
	}
	b.StopTimer()
	harness.ReportPercentiles(b, "first", first)
	harness.ReportPercentiles(b, "running", warm)
}
