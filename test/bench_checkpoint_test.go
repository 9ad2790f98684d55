package sandpit_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// holdMemory makes a process in the sandbox hold about 512 MiB of memory
// that is not zero (eight distinct 64 MiB strings in busybox awk, which
// copies a string on assignment), and returns once it does.
const holdMemory = `awk 'BEGIN { s = "x"; while (length(s) < 67108864) s = s s; for (i = 0; i < 8; i++) a[i] = s i; s = ""; ` +
	`print "ready" > "/tmp/held"; close("/tmp/held"); while (1) system("sleep 3600") }' </dev/null >/dev/null 2>&1 &
for i in $(seq 600); do [ -s /tmp/held ] && exit 0; sleep 0.1; done; exit 1`

// BenchmarkCheckpoint times a memory pause and its resume of one sandbox,
// idle and holding 512 MiB, under runc (the freezer: the processes stay in
// memory) and under runsc-ckpt (a checkpoint: the processes are written to
// the data directory and the container stops; the resume restores them),
// in one run so the figures sit side by side. It reports the mean pause and
// resume times, the checkpoint's size on disk and the memory the container
// holds while paused. Run with -benchtime=3x.
func BenchmarkCheckpoint(b *testing.B) {
	harness.RequireRuntime(b, checkpointRuntime)
	for _, rt := range []struct{ name, runtime string }{
		{"freezer-runc", "runc"},
		{"checkpoint-runsc-ckpt", checkpointRuntime},
	} {
		d := harness.Start(b, sandpitBin, harness.Options{Args: []string{"--oci-runtime", rt.runtime}})
		c := d.Client()
		for _, load := range []struct {
			name string
			fill bool
		}{{"idle", false}, {"512MiB", true}} {
			b.Run(rt.name+"/"+load.name, func(b *testing.B) {
				benchPauseResume(b, d, c, load.fill)
			})
		}
	}
}

func benchPauseResume(b *testing.B, d *harness.Daemon, c *client.Client, fill bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, client.CreateRequest{MemoryMB: 2048})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Delete(context.Background(), sb.ID) }()
	if fill {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", holdMemory}, TimeoutS: 120})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("hold 512 MiB: %v exit %d %q", err, res.ExitCode, res.Stderr)
		}
	}
	ckpt := filepath.Join(d.DataDir, "checkpoints", sb.ID)
	out, err := exec.Command("docker", "inspect", "-f", "{{.Id}}", "sandpit-"+sb.ID).Output()
	if err != nil {
		b.Fatalf("docker inspect: %v", err)
	}
	full := strings.TrimSpace(string(out))
	var pause, resume time.Duration
	var size, held int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Pause(ctx, sb.ID, "memory"); err != nil {
			b.Fatal(err)
		}
		pause += time.Since(t0)
		size += treeSize(ckpt)
		held += pausedMemory(full)
		t0 = time.Now()
		if _, err := c.Resume(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		resume += time.Since(t0)
	}
	b.StopTimer()
	if fill {
		// The memory is still held after the last resume.
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", "pidof awk"}, TimeoutS: 30})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("the process holding the memory is gone after the resume: %v exit %d", err, res.ExitCode)
		}
	}
	n := float64(b.N)
	b.ReportMetric(pause.Seconds()/n, "pause-s")
	b.ReportMetric(resume.Seconds()/n, "resume-s")
	b.ReportMetric(float64(size)/n/(1<<20), "disk-MiB")
	b.ReportMetric(float64(held)/n/(1<<20), "paused-mem-MiB")
}

// pausedMemory is the memory the container's cgroup (v1, as on these
// machines) holds: a frozen container keeps its processes' memory, a
// stopped one has no cgroup left (0).
func pausedMemory(containerID string) int64 {
	raw, err := os.ReadFile("/sys/fs/cgroup/memory/docker/" + containerID + "/memory.usage_in_bytes")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	return n
}

// treeSize is the total size of the files under dir (0 when it is absent).
func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	if _, err := os.Stat(dir); err != nil {
		return 0
	}
	return n
}
