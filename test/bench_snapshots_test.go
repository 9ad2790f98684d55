package sandpit_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// BenchmarkSnapshot times a snapshot of a sandbox that wrote 100 MB, beside
// the bare `docker commit` of the same container in the same iteration (the
// baseline: the engine's own work); it reports both medians and their ratio
// (ratio-p50, snapshot over commit). Each iteration writes a fresh 100 MB so
// neither reuses a layer. Run with -benchtime=5x.
func BenchmarkSnapshot(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	var snap, commit []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", fmt.Sprintf("dd if=/dev/urandom of=/root/blob bs=1M count=100 2>/dev/null && echo %d >> /root/blob", i)}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("write 100 MB: %+v %v", res, err)
		}
		b.StartTimer()
		start := time.Now()
		t, err := c.Snapshot(ctx, sb.ID, client.SnapshotRequest{})
		if err != nil {
			b.Fatal(err)
		}
		snap = append(snap, time.Since(start))
		ref := fmt.Sprintf("sandpit-bench/commit:%d-%d", time.Now().UnixNano(), i)
		start = time.Now()
		if out, err := exec.Command("docker", "commit", "sandpit-"+sb.ID, ref).CombinedOutput(); err != nil {
			b.Fatalf("docker commit: %v %s", err, out)
		}
		commit = append(commit, time.Since(start))
		b.StopTimer()
		_ = exec.Command("docker", "rmi", ref).Run()
		if err := c.DeleteSnapshot(ctx, t.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	harness.ReportPercentiles(b, "snapshot", snap)
	harness.ReportPercentiles(b, "commit", commit)
	b.ReportMetric(float64(harness.Percentile(snap, 0.5))/float64(harness.Percentile(commit, 0.5)), "ratio-p50")
}

// BenchmarkCreateFromSnapshot puts a create from a snapshot beside a create
// from the image the snapshotted sandbox runs, alternating them in each
// iteration so both see the same machine load, and a fork of 3 beside three
// creates from the image; it reports the medians and the ratios
// (ratio-p50: snapshot create over image create; fork3-ratio-p50: fork of
// 3 over 3 sequential image creates). Run with -benchtime=20x.
func BenchmarkCreateFromSnapshot(b *testing.B) {
	d := harness.Start(b, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := context.Background()
	src, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if res, err := c.Exec(ctx, src.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "dd if=/dev/urandom of=/root/blob bs=1M count=20 2>/dev/null"}}); err != nil || res.ExitCode != 0 {
		b.Fatalf("write: %+v %v", res, err)
	}
	if _, err := c.Snapshot(ctx, src.ID, client.SnapshotRequest{Name: "bench-snap"}); err != nil {
		b.Fatal(err)
	}
	var fromSnap, fromImage, fork3, image3 []time.Duration
	timed := func(into *[]time.Duration, req client.CreateRequest) {
		start := time.Now()
		sb, err := c.Create(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(start))
		b.StopTimer()
		if err := c.Delete(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		timed(&fromSnap, client.CreateRequest{Template: "bench-snap"})
		timed(&fromImage, client.CreateRequest{})
		start := time.Now()
		forks, err := c.Fork(ctx, src.ID, client.ForkRequest{Count: 3})
		if err != nil {
			b.Fatal(err)
		}
		fork3 = append(fork3, time.Since(start))
		b.StopTimer()
		for _, f := range forks {
			if f.Sandbox == nil {
				b.Fatalf("a copy failed: %+v", f.Error)
			}
			if err := c.Delete(ctx, f.Sandbox.ID); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start = time.Now()
		var made []string
		for range 3 {
			sb, err := c.Create(ctx, client.CreateRequest{})
			if err != nil {
				b.Fatal(err)
			}
			made = append(made, sb.ID)
		}
		image3 = append(image3, time.Since(start))
		b.StopTimer()
		for _, id := range made {
			if err := c.Delete(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	harness.ReportPercentiles(b, "from-snapshot", fromSnap)
	harness.ReportPercentiles(b, "from-image", fromImage)
	harness.ReportPercentiles(b, "fork3", fork3)
	harness.ReportPercentiles(b, "image3", image3)
	b.ReportMetric(float64(harness.Percentile(fromSnap, 0.5))/float64(harness.Percentile(fromImage, 0.5)), "ratio-p50")
	b.ReportMetric(float64(harness.Percentile(fork3, 0.5))/float64(harness.Percentile(image3, 0.5)), "fork3-ratio-p50")
}
