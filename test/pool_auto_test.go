package sandpit_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestPoolSizedFromDemand: with no --warm-pool (the auto pool is on by
// default; the harness turns it off, so it is turned on here), the first
// create of the default image is cold and makes the image a pool, whose
// slot the next create adopts; another image gets a pool from its second
// create; the pool's memory is visible and bounded; and once no create
// comes for --warm-pool-idle, the free slots are removed while the adopted
// sandboxes run on.
func TestPoolSizedFromDemand(t *testing.T) {
	t.Parallel()
	other := "sandpit/base:autopool-" + strings.ToLower(t.Name()[len(t.Name())-6:])
	if out, err := exec.Command("docker", "tag", "sandpit/base:test", other).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", other).Run() })
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--warm-pool-auto=true", "--warm-pool-idle", "20s", "--warm-pool-auto-max", "2"}})
	c := d.Client()
	ctx := ctxFor(t, 5*time.Minute)

	st := poolStatus(t, d)
	if !st.Auto || st.AutoMax != 2 || len(st.Pools) != 0 || st.MemoryLimitMB != 0 {
		t.Fatalf("pool before any create: %+v, want auto (at most 2 an image) and empty", st)
	}
	first, timing := poolCreate(t, d, apitypes.CreateRequest{}, "")
	if !strings.Contains(timing, "desc=cold") {
		t.Errorf("the first create: Server-Timing %q, want cold", timing)
	}
	ready := awaitAutoPool(t, d, "sandpit/base:test", 1)
	if st := poolStatus(t, d); st.MemoryLimitMB != int64(ready)*1024 {
		t.Errorf("memory_limit_mb %d with %d ready slots, want 1024 each (the default limit)", st.MemoryLimitMB, ready)
	}
	second, timing := poolCreate(t, d, apitypes.CreateRequest{}, "")
	if !strings.Contains(timing, "desc=warm") {
		t.Errorf("the create after the pool filled: Server-Timing %q, want warm", timing)
	}
	if st := poolStatus(t, d); st.Hits != 1 {
		t.Errorf("hits %d after one warm create, want 1", st.Hits)
	}
	if res, err := c.Exec(ctx, second.ID, client.ExecRequest{Cmd: "echo", Args: []string{"warm"}}); err != nil || strings.TrimSpace(res.Stdout) != "warm" {
		t.Errorf("exec in the adopted sandbox: %+v %v", res, err)
	}

	// Another image: its second create within the minute earns it a pool.
	for range 2 {
		poolCreate(t, d, apitypes.CreateRequest{Image: other}, "")
	}
	awaitAutoPool(t, d, other, 1)

	// No create for --warm-pool-idle: every free slot goes; the sandboxes,
	// adopted or not, run on.
	adopted := hostnameOf(t, c, second.ID)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		st := poolStatus(t, d)
		free := 0
		for _, id := range pooledContainers(t, d) {
			if adopted == "" || !strings.HasPrefix(id, adopted) {
				free++
			}
		}
		if len(st.Pools) == 0 && st.MemoryLimitMB == 0 && free == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle pool was not retired: %+v, %d free pooled containers", st, free)
		}
	}
	for _, id := range []string{first.ID, second.ID} {
		if sb, err := c.Get(ctx, id); err != nil || sb.State != "running" {
			t.Errorf("sandbox %s after the pool retired: %+v %v", id, sb, err)
		}
	}
	if !strings.Contains(d.Logs(), "warm pool: idle slot retired") {
		t.Error("the retirement is not logged")
	}
}

// awaitAutoPool waits until the auto pool of image has ready slots, and
// returns how many.
func awaitAutoPool(t *testing.T, d *harness.Daemon, image string, ready int) int {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st := poolStatus(t, d)
		for _, p := range st.Pools {
			if p.Image == image && p.Auto && p.Ready >= ready {
				return p.Ready
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no auto pool of %s with %d ready slots: %+v", image, ready, st)
		}
	}
}

// BenchmarkDefaultPoolSteadyStream: a daemon as a user runs it (no pool
// flag: the auto pool on) under a steady stream of creates of the default
// image, one every interval, each followed by its first exec and a delete.
// It reports the first create -> first exec (cold, before the image has a
// pool), the p50/p99 of the rest, the bare engine's create+start of the
// same image on the daemon's network in the same run (the baseline), the
// share of warm creates with their server-side time (Server-Timing), and
// the pool's memory bound at the end. Run with
// -benchtime=40x.
func BenchmarkDefaultPoolSteadyStream(b *testing.B) {
	for _, every := range []time.Duration{time.Second, 250 * time.Millisecond} {
		b.Run("every="+every.String(), func(b *testing.B) {
			d := harness.Start(b, sandpitBin, harness.Options{Args: []string{"--warm-pool-auto=true"}})
			c := d.Client()
			ctx := context.Background()
			cli, label := benchEngine(b)
			var first time.Duration
			var rest, engine, warmServer []time.Duration
			var lastWarm string
			warm := 0
			tick := time.NewTicker(every)
			defer tick.Stop()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				<-tick.C
				start := time.Now()
				sb, timing := poolCreate(b, d, apitypes.CreateRequest{}, "")
				if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "true"}); err != nil || res.ExitCode != 0 {
					b.Fatalf("first exec: %v %v", res, err)
				}
				took := time.Since(start)
				if i == 0 {
					first = took
				} else {
					rest = append(rest, took)
					if strings.Contains(timing, "desc=warm") {
						warm++
						warmServer = append(warmServer, serverTotal(b, timing))
						lastWarm = timing
					}
				}
				b.StopTimer()
				if err := c.Delete(ctx, sb.ID); err != nil {
					b.Fatal(err)
				}
				// The baseline, one in every four rounds so that it does
				// not crowd the stream out.
				if i%4 == 0 {
					engine = append(engine, engineCreateStart(ctx, b, cli, label, &container.HostConfig{NetworkMode: container.NetworkMode(d.Network)}))
				}
				b.StartTimer()
			}
			b.StopTimer()
			st := poolStatus(b, d)
			b.ReportMetric(harness.Millis(first), "first-ms")
			harness.ReportPercentiles(b, "rest", rest)
			harness.ReportPercentiles(b, "engine", engine)
			// The warm creates' own part, as the server timed it; the rest
			// of a warm figure is the client's round trips and the exec.
			harness.ReportPercentiles(b, "warm-server", warmServer)
			b.Logf("the last warm create's Server-Timing: %s", lastWarm)
			if len(rest) > 0 {
				b.ReportMetric(float64(warm)/float64(len(rest)), "warm-share")
			}
			b.ReportMetric(float64(st.MemoryLimitMB), "pool-limit-MB")
		})
	}
}
