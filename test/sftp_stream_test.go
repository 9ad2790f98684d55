package sandpit_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// stagedBytes is what the daemon holds in files under dir: those in the
// directory and those it holds open there, removed ones included (a
// temporary file is often removed as soon as it is made).
func stagedBytes(pid int, dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(fds)
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(fds, e.Name()))
		if err != nil || !strings.HasPrefix(target, dir) || !strings.HasSuffix(target, "(deleted)") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(fds, e.Name())); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// TestSFTPStreams: an SFTP read of a 2 GiB sparse file (no space in the
// sandbox) stages at most 64 MiB on the host, measured in the daemon's
// temporary directory through the whole transfer; an SFTP write arrives
// whole and comes back the same.
func TestSFTPStreams(t *testing.T) {
	t.Parallel()
	requireTools(t, "ssh", "sftp", "ssh-keygen")
	harness.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	port := new(string)
	d := harness.Start(t, sandpitBin, harness.Options{Env: []string{"TMPDIR=" + tmp}, PortArgs: func() []string {
		*port = strconv.Itoa(testkit.FreePort(t))
		return []string{"--ssh-listen", "127.0.0.1:" + *port}
	}})
	c := d.Client()
	name := "sftp-" + randomHex(4)
	sb, err := c.Create(ctx, client.CreateRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, ctx, c, sb.ID, "dd if=/dev/null of=/tmp/big bs=1048576 seek=2048 2>/dev/null && ls -l /tmp/big")
	dir := t.TempDir()
	key, pub := sshKeygen(t, dir, "owner")
	if _, err := c.AddSSHKey(ctx, "", pub); err != nil {
		t.Fatal(err)
	}
	s := sshClient{t: t, addr: "127.0.0.1", port: *port, key: key, knownHosts: filepath.Join(dir, "known_hosts")}
	host := name + "@127.0.0.1"

	t.Run("read 2 GiB", func(t *testing.T) {
		var peak atomic.Int64
		stop := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for {
				if n := stagedBytes(d.Pid(), tmp); n > peak.Load() {
					peak.Store(n)
				}
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		batch := filepath.Join(dir, "get")
		if err := os.WriteFile(batch, []byte("get /tmp/big /dev/null\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		out, errOut, code := s.run(ctx, nil, "sftp", "-b", batch, host)
		close(stop)
		<-watched
		if code != 0 {
			t.Fatalf("sftp get: %d\n%s\n%s", code, out, errOut)
		}
		t.Logf("2 GiB read over SFTP in %s; the daemon's temporary directory peaked at %d bytes", time.Since(t0).Round(time.Millisecond), peak.Load())
		if peak.Load() > 64<<20 {
			t.Errorf("the read staged %d bytes on the host, want at most 64 MiB", peak.Load())
		}
	})

	t.Run("write", func(t *testing.T) {
		data := make([]byte, 20<<20+12345)
		_, _ = rand.Read(data)
		local := filepath.Join(dir, "up.bin")
		if err := os.WriteFile(local, data, 0o600); err != nil {
			t.Fatal(err)
		}
		batch := filepath.Join(dir, "put")
		if err := os.WriteFile(batch, []byte("put "+local+" /tmp/up.bin\nget /tmp/up.bin "+local+".back\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, errOut, code := s.run(ctx, nil, "sftp", "-b", batch, host); code != 0 {
			t.Fatalf("sftp put/get: %d\n%s\n%s", code, out, errOut)
		}
		back, err := os.ReadFile(local + ".back")
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("the file came back %d bytes (%v), want the %d written", len(back), err, len(data))
		}
	})
}
