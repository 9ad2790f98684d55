package sandpit_test

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/agentbin"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// daemonOnlyModules are modules the daemon links and the small agent must
// not: the engine client, the store, the cluster's Raft, Prometheus, the
// CLI framework and the OpenAPI validator.
var daemonOnlyModules = []string{
	"github.com/docker/docker", "modernc.org/sqlite", "github.com/hashicorp/raft",
	"github.com/prometheus/client_golang", "github.com/spf13/cobra", "github.com/getkin/kin-openapi",
}

// TestSandboxRunsSmallAgent: a daemon built as scripts/build.sh builds it
// mounts the small agent it embeds, installed into its data directory,
// rather than its own executable, and the sandbox works through it.
func TestSandboxRunsSmallAgent(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	c := d.Client()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, d.Logs())
	}
	if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo", Args: []string{"hi"}}); err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "hi" {
		t.Fatalf("exec through the agent: %+v %v", res, err)
	}
	want := filepath.Join(d.DataDir, agentbin.FileName)
	if got := agentMountSource(t, ctx, d, sb.ID); got != want {
		t.Fatalf("the sandbox mounts %s as agent, want the embedded agent installed at %s", got, want)
	}
	info, err := buildinfo.ReadFile(want)
	if err != nil {
		t.Fatalf("read the agent's build info: %v", err)
	}
	if info.Path != "github.com/sandpit-dev/sandpit/cmd/sandpit-agent" {
		t.Errorf("the installed agent is %s, want cmd/sandpit-agent", info.Path)
	}
	for _, dep := range info.Deps {
		if slices.Contains(daemonOnlyModules, dep.Path) {
			t.Errorf("the agent links %s, which only the daemon needs", dep.Path)
		}
	}
	agentSize, daemonSize := fileSize(t, want), fileSize(t, sandpitBin)
	if agentSize*2 > daemonSize {
		t.Errorf("the agent is %d bytes, not much smaller than the %d-byte daemon", agentSize, daemonSize)
	}
}

// TestPlainBuildRunsItselfAsAgent: a plain `go build ./cmd/sandpit` of a
// clean checkout embeds no agent; its sandboxes run the sandpit executable
// itself through its agent subcommand, and work the same.
func TestPlainBuildRunsItselfAsAgent(t *testing.T) {
	t.Parallel()
	bin, err := harness.BuildWithoutAgent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := harness.Start(t, bin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	c := d.Client()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, d.Logs())
	}
	if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo", Args: []string{"hi"}}); err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "hi" {
		t.Fatalf("exec through the agent: %+v %v", res, err)
	}
	if got := agentMountSource(t, ctx, d, sb.ID); got != bin {
		t.Fatalf("the sandbox mounts %s as agent, want the daemon's own executable %s", got, bin)
	}
	if _, err := os.Stat(filepath.Join(d.DataDir, agentbin.FileName)); !os.IsNotExist(err) {
		t.Errorf("a build without an agent installed one anyway: %v", err)
	}
}

// BenchmarkAgentIdleMemory measures what an idle sandbox's agent costs, side
// by side: the small agent scripts/build.sh embeds (agent=small) against the
// whole sandpit executable as agent (agent=daemon, a plain go build). Every
// iteration creates one sandbox; once all are made and have idled a few
// seconds, each one's memory is read on the host:
//
//   - cgroup-KiB: the container's memory cgroup, usage less inactive file
//     pages (what `docker stats` shows);
//   - rss-KiB: VmRSS of the agent's two processes (PID 1 and the server it
//     starts), file pages of the executable included;
//   - anon-KiB: RssAnon of the same, the part each sandbox pays on its own;
//   - agent-bytes: the size of the executable mounted as agent.
//
// Run with -benchtime=5x for five sandboxes of each.
func BenchmarkAgentIdleMemory(b *testing.B) {
	plain, err := harness.BuildWithoutAgent(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, bin string }{{"small", sandpitBin}, {"daemon", plain}} {
		b.Run("agent="+tc.name, func(b *testing.B) {
			d := harness.Start(b, tc.bin, harness.Options{})
			c := d.Client()
			ctx := context.Background()
			ids := make([]string, 0, b.N)
			for i := 0; i < b.N; i++ {
				sb, err := c.Create(ctx, client.CreateRequest{})
				if err != nil {
					b.Fatal(err)
				}
				ids = append(ids, sb.ID)
			}
			b.StopTimer()
			time.Sleep(3 * time.Second) // past start-up, as an idle sandbox is
			var cg, rss, anon int
			for _, id := range ids {
				m := agentMemory(b, ctx, d, id)
				cg, rss, anon = cg+m.cgroupKiB, rss+m.rssKiB, anon+m.anonKiB
			}
			n := float64(len(ids))
			b.ReportMetric(float64(cg)/n, "cgroup-KiB")
			b.ReportMetric(float64(rss)/n, "rss-KiB")
			b.ReportMetric(float64(anon)/n, "anon-KiB")
			b.ReportMetric(float64(fileSize(b, agentMountSource(b, ctx, d, ids[0]))), "agent-bytes")
			b.ReportMetric(float64(fileSize(b, tc.bin)), "daemon-bytes")
		})
	}
}

// agentMountSource is the host file the sandbox's container mounts as its
// agent.
func agentMountSource(tb testing.TB, ctx context.Context, d *harness.Daemon, id string) string {
	tb.Helper()
	return strings.TrimSpace(dockerInspect(tb, ctx, d, id, `{{range .Mounts}}{{if eq .Destination "/.sandpit/sandpit"}}{{.Source}}{{end}}{{end}}`))
}

func dockerInspect(tb testing.TB, ctx context.Context, d *harness.Daemon, id, format string) string {
	tb.Helper()
	containers, err := d.SandboxContainers(ctx, id)
	if err != nil || len(containers) != 1 {
		tb.Fatalf("containers of %s: %v %v", id, containers, err)
	}
	out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", format, containers[0]).Output()
	if err != nil {
		tb.Fatalf("docker inspect %s: %v", containers[0], err)
	}
	return string(out)
}

type memory struct{ cgroupKiB, rssKiB, anonKiB int }

// agentMemory reads, on the host, the memory of a sandbox's container
// cgroup and of its agent processes: PID 1 and its children (an idle
// sandbox has only the agent's server).
func agentMemory(tb testing.TB, ctx context.Context, d *harness.Daemon, id string) memory {
	tb.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(dockerInspect(tb, ctx, d, id, "{{.State.Pid}}")))
	if err != nil || pid <= 0 {
		tb.Fatalf("container pid of %s: %v", id, err)
	}
	var m memory
	for _, p := range append([]int{pid}, childrenOf(tb, pid)...) {
		st := procStatus(tb, p)
		m.rssKiB += st["VmRSS"]
		m.anonKiB += st["RssAnon"]
	}
	m.cgroupKiB = cgroupKiB(tb, pid)
	return m
}

// procStatus reads the kB fields of /proc/<pid>/status.
func procStatus(tb testing.TB, pid int) map[string]int {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if num, ok := strings.CutSuffix(v, " kB"); ok {
			out[k], _ = strconv.Atoi(strings.TrimSpace(num))
		} else if k == "PPid" {
			out[k], _ = strconv.Atoi(v)
		}
	}
	return out
}

func childrenOf(tb testing.TB, parent int) []int {
	tb.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	var kids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command, which is in parentheses and may
		// hold spaces: state, then the parent's pid.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(parent) {
				kids = append(kids, pid)
			}
		}
	}
	return kids
}

// cgroupKiB is the memory cgroup usage of the process's container less its
// inactive file pages, under cgroup v1 or v2.
func cgroupKiB(tb testing.TB, pid int) int {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		tb.Fatal(err)
	}
	var usageFile, statKey, dir string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if slices.Contains(strings.Split(f[1], ","), "memory") {
			dir, usageFile, statKey = filepath.Join("/sys/fs/cgroup/memory", f[2]), "memory.usage_in_bytes", "total_inactive_file"
			break
		}
		if f[0] == "0" && f[1] == "" {
			dir, usageFile, statKey = filepath.Join("/sys/fs/cgroup", f[2]), "memory.current", "inactive_file"
		}
	}
	if dir == "" {
		tb.Fatalf("no memory cgroup in /proc/%d/cgroup:\n%s", pid, b)
	}
	usage := readInt(tb, filepath.Join(dir, usageFile))
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == statKey {
			n, _ := strconv.Atoi(v)
			usage -= n
		}
	}
	return usage / 1024
}

func readInt(tb testing.TB, path string) int {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return n
}

func fileSize(tb testing.TB, path string) int {
	tb.Helper()
	st, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return int(st.Size())
}
