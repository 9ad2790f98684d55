package sandpit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// buildAndWait starts a template build and waits for its end, which must
// be ready.
func buildAndWait(b *testing.B, ctx context.Context, c *client.Client, req client.BuildTemplateRequest) client.BuildTemplateResponse {
	b.Helper()
	res, err := c.BuildTemplate(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	end, err := c.WaitBuild(ctx, res.Template.ID, res.Build.ID, nil)
	if err != nil {
		b.Fatal(err)
	}
	if end.State != "ready" {
		b.Fatalf("build %s ended %s: %s", end.ID, end.State, end.Error)
	}
	return res
}

// BenchmarkTemplateBuild times a 3-step template (FROM sandpit/base:test,
// RUN, COPY, RUN) from the build request until the build is ready: cold (a
// content the daemon and the engine have never seen: the first RUN carries
// a fresh value each iteration, so no layer is cached) and then the rebuild
// of the very same definition, which the daemon replays from the first
// build without asking the engine. It reports both and their ratio
// (ratio-p50, rebuild over cold). Run with -benchtime=10x.
func BenchmarkTemplateBuild(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := context.Background()
	archive, err := client.TarContext(writeTree(b, map[string]string{"app/run.sh": "echo from the context\n"}))
	if err != nil {
		b.Fatal(err)
	}
	hash, err := c.UploadTemplateFiles(ctx, archive)
	if err != nil {
		b.Fatal(err)
	}
	var cold, rebuild []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := client.BuildTemplateRequest{Name: "bench-build", Context: hash, Dockerfile: fmt.Sprintf("FROM sandpit/base:test\n"+
			"RUN echo %d-%d > /nonce\nCOPY app /app\nRUN sh /app/run.sh > /out\n", time.Now().UnixNano(), i)}
		start := time.Now()
		first := buildAndWait(b, ctx, c, req)
		cold = append(cold, time.Since(start))
		start = time.Now()
		again := buildAndWait(b, ctx, c, req)
		rebuild = append(rebuild, time.Since(start))
		if again.Build.ID == first.Build.ID {
			b.Fatal("the rebuild answered the first build itself")
		}
	}
	b.StopTimer()
	harness.ReportPercentiles(b, "cold", cold)
	harness.ReportPercentiles(b, "rebuild", rebuild)
	b.ReportMetric(float64(harness.Percentile(rebuild, 0.5))/float64(harness.Percentile(cold, 0.5)), "ratio-p50")
}

// BenchmarkCreateFromTemplate puts a create from a built template (its
// image, defaults and no start command) beside a create from the image it
// was built FROM, alternating the two in each iteration so both see the
// same machine load; it reports both medians and their ratio (ratio-p50,
// template over image). Run with -benchtime=30x.
func BenchmarkCreateFromTemplate(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := context.Background()
	buildAndWait(b, ctx, c, client.BuildTemplateRequest{Name: "bench-create", Dockerfile: "FROM sandpit/base:test\nRUN echo ready > /ready\n"})
	var fromImage, fromTemplate []time.Duration
	timeCreate := func(req client.CreateRequest) time.Duration {
		start := time.Now()
		sb, err := c.Create(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		if err := c.Delete(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		return took
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fromImage = append(fromImage, timeCreate(client.CreateRequest{Image: "sandpit/base:test"}))
		fromTemplate = append(fromTemplate, timeCreate(client.CreateRequest{Template: "bench-create"}))
	}
	b.StopTimer()
	harness.ReportPercentiles(b, "image", fromImage)
	harness.ReportPercentiles(b, "template", fromTemplate)
	b.ReportMetric(float64(harness.Percentile(fromTemplate, 0.5))/float64(harness.Percentile(fromImage, 0.5)), "ratio-p50")
}

// peakRSSKiB reads a process's peak resident set (VmHWM), and resets it
// when reset is set (clear_refs 5), so the next reading is the peak of
// what happens in between.
func peakRSSKiB(b *testing.B, pid int, reset bool) int {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	kib := 0
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _ = strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
		}
	}
	if reset {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			b.Fatal(err)
		}
	}
	return kib
}

// BenchmarkBuildOutput: a build that prints 400 MB, beside a plain build
// in the same daemon: how far each raises the daemon's peak RSS above its
// resting RSS, and how much log each leaves on disk (the default budget is
// 8 MiB). Run with -benchtime=1x.
func BenchmarkBuildOutput(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := context.Background()
	logSize := func(id string) float64 {
		info, err := os.Stat(filepath.Join(d.DataDir, "templates", "logs", id+".jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		return float64(info.Size()) / (1 << 20)
	}
	run := func(name, step string) (peakMiB, logMiB float64) {
		time.Sleep(500 * time.Millisecond)
		rest := d.RSSKiB(b)
		peakRSSKiB(b, d.Pid(), true)
		res := buildAndWait(b, ctx, c, client.BuildTemplateRequest{Name: name, Dockerfile: "FROM sandpit/base:test\nRUN " + step + "\n", NoCache: true})
		peak := peakRSSKiB(b, d.Pid(), false)
		return float64(peak-rest) / 1024, logSize(res.Build.ID)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		plainPeak, plainLog := run(fmt.Sprintf("plain-%d", i), fmt.Sprintf("echo plain %d", i))
		noisyPeak, noisyLog := run(fmt.Sprintf("noisy-%d", i), "yes 0123456789012345678901234567890123456789012345678901234567890123456789 | head -c 400000000")
		b.ReportMetric(plainPeak, "plain-peak-rss-MiB")
		b.ReportMetric(plainLog, "plain-log-MiB")
		b.ReportMetric(noisyPeak, "400MB-peak-rss-MiB")
		b.ReportMetric(noisyLog, "400MB-log-MiB")
	}
}
