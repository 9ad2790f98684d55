package harness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// QuotaNetworkPool is the range the sandbox networks of daemons on a
// QuotaEngine come from. Such an engine does not know the networks of the
// machine's own engine, yet its bridges share the host's routing table, so
// its networks must come from a range no other test daemon uses (NetworkPool
// is 10.200.0.0/14).
const QuotaNetworkPool = "10.204.0.0/16"

// QuotaEngine starts a Docker engine of the test's own whose storage driver
// enforces a container's writable-layer size, and returns its DOCKER_HOST.
// The machine's engine is overlay2 on ext4, which cannot; overlay2 can only
// on XFS with project quotas, which this kernel lacks ("XFS: quota support
// not available in this kernel"). btrfs with quotas can: the engine's btrfs
// driver turns the "size" storage option into a qgroup limit. So the engine
// keeps its data on a btrfs filesystem in a loop file under the test's
// temporary directory, and everything it holds is the test's.
//
// The engine runs beside the machine's without touching it: its own data
// and exec roots (so its own containerd), an empty configuration file (the
// machine's /etc/docker/daemon.json is not its), a default bridge of its
// own (never docker0, which is the machine's engine's), no iptables rules (the machine's engine owns the shared chains, which an
// engine starting with iptables would recreate), and address pools apart
// from the machine's. images are copied into it from the machine's engine.
// Everything is removed when the test ends.
func QuotaEngine(t testing.TB, images ...string) string {
	t.Helper()
	RequireDocker(t)
	for _, tool := range []string{"mkfs.btrfs", "btrfs", "dockerd", "mount", "umount", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s missing in CI (apt-get install btrfs-progs): %v", tool, err)
			}
			t.Skipf("%s missing: %v", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("a quota engine needs root (loop mounts, dockerd)")
	}
	dir := t.TempDir()
	img, mnt, execRoot := filepath.Join(dir, "disk.img"), filepath.Join(dir, "data"), filepath.Join(dir, "exec")
	sock := filepath.Join(dir, "docker.sock")
	host := "unix://" + sock
	run := func(name string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	for _, d := range []string{mnt, execRoot} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A sparse file: the test writes a few hundred MB into it.
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(4 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run("mkfs.btrfs", "-q", "-f", img)
	run("mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		// The loop device goes with the mount (mount -o loop sets
		// autoclear). The engine's containers and their mounts are gone by
		// now; a straggler gets a few seconds.
		for i := 0; i < 20; i++ {
			if exec.Command("umount", mnt).Run() == nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		out, err := exec.Command("umount", "-l", mnt).CombinedOutput()
		if err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
		}
	})
	run("btrfs", "quota", "enable", mnt)

	// The engine's default bridge is a device of the test's own: with
	// --bridge none an engine deletes the device named docker0 at start,
	// which is the machine's engine's.
	hadDocker0 := exec.Command("ip", "link", "show", "docker0").Run() == nil
	t.Cleanup(func() {
		if hadDocker0 && exec.Command("ip", "link", "show", "docker0").Run() != nil {
			t.Error("the machine's engine's bridge docker0 is gone")
		}
	})
	bridge := "spq" + randHex(4)
	run("ip", "link", "add", bridge, "type", "bridge")
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil {
			t.Errorf("ip link del %s: %v\n%s", bridge, err, out)
		}
	})
	run("ip", "addr", "add", "10.205.255.1/24", "dev", bridge)
	run("ip", "link", "set", bridge, "up")

	config := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(config, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dockerd", "--config-file", config, "--data-root", filepath.Join(mnt, "docker"),
		"--exec-root", execRoot, "--pidfile", filepath.Join(dir, "dockerd.pid"), "-H", host,
		"--storage-driver", "btrfs", "--bridge", bridge, "--iptables=false", "--ip-masq=false",
		"--default-address-pool", "base=10.205.0.0/17,size=24", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that a signal meant for the test's
	// terminal never reaches it before its cleanup has run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	dockerAt := func(ctx context.Context, args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, "docker", args...)
		c.Env = append(os.Environ(), "DOCKER_HOST="+host)
		return c
	}
	t.Cleanup(func() {
		// Everything on this engine is the test's: remove it all, so that no
		// shim outlives the engine and holds the filesystem.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if out, err := dockerAt(ctx, "ps", "-aq").Output(); err == nil {
			if ids := strings.Fields(string(out)); len(ids) > 0 {
				_ = dockerAt(ctx, append([]string{"rm", "-f"}, ids...)...).Run()
			}
		}
		_ = dockerAt(ctx, "network", "prune", "-f").Run()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			if b, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("quota engine's log:\n%s", b)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for dockerAt(ctx, "info").Run() != nil {
		select {
		case <-exited:
			b, _ := os.ReadFile(logFile.Name())
			t.Fatalf("the quota engine exited at start:\n%s", b)
		case <-ctx.Done():
			t.Fatal("the quota engine did not answer within 60 s")
		case <-time.After(250 * time.Millisecond):
		}
	}
	for _, image := range images {
		save := exec.CommandContext(ctx, "docker", "save", image)
		load := dockerAt(ctx, "load", "-q")
		pipe, err := save.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		load.Stdin = pipe
		if err := save.Start(); err != nil {
			t.Fatal(err)
		}
		out, err := load.CombinedOutput()
		if werr := save.Wait(); err != nil || werr != nil {
			t.Fatalf("copying %s into the quota engine: %v %v\n%s", image, werr, err, out)
		}
	}
	return host
}
