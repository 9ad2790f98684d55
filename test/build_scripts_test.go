package sandpit_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestBuildScriptsSayWhatTheyWaitFor: an image build script that finds its
// lock held by another run says, before it blocks, which image it waits
// for, the lock file and the pid holding it. The test holds each lock
// itself and ends the script while it waits, so nothing is built; every
// image named is a throwaway one, and the cache directory a temporary one.
func TestBuildScriptsSayWhatTheyWaitFor(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	throwaway := "sandpit-test/lock-wait-" + strconv.Itoa(os.Getpid())
	cases := []struct {
		script string
		env    []string
		// lock is the lock file's name in the temporary directory.
		lock  string
		needs string
	}{
		{"build-base-image.sh", []string{"SANDPIT_BASE_IMAGE=" + throwaway}, "build-base-image.lock", ""},
		{"build-code-interpreter-image.sh", []string{"SANDPIT_INTERPRETER_IMAGE=" + throwaway}, "build-code-interpreter-image.lock", ""},
		{"build-daytona-image.sh", []string{"SANDPIT_DAYTONA_IMAGE=" + throwaway}, "build-daytona-image.lock", "npm"},
		{"build-desktop-image.sh", []string{"SANDPIT_DESKTOP_IMAGE=" + throwaway}, "build-desktop-image.lock", ""},
		{"build-test-image.sh", []string{"SANDPIT_TEST_IMAGE=" + throwaway + ":test"}, "sandpit-build-test-image.lock", ""},
	}
	for _, tc := range cases {
		t.Run(tc.script, func(t *testing.T) {
			if tc.needs != "" {
				if _, err := exec.LookPath(tc.needs); err != nil {
					if testenv.InCI() {
						t.Fatalf("no %s: .ci/run installs it", tc.needs)
					}
					t.Skipf("no %s: the script builds nothing and takes no lock without it", tc.needs)
				}
			}
			dir := t.TempDir()
			lock := filepath.Join(dir, tc.lock)
			f, err := os.OpenFile(lock, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", filepath.Join(root, "scripts", tc.script))
			cmd.Env = append(append(os.Environ(), "SANDPIT_CACHE_DIR="+dir, "TMPDIR="+dir), tc.env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The script and what it started end before the lock is let
			// go (the deferred close), so that no build ever begins.
			defer func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				_ = cmd.Wait()
			}()
			want := []string{
				"waiting for another build of " + throwaway,
				"(lock " + lock + ", held by pid " + strconv.Itoa(os.Getpid()) + ")",
			}
			var seen []string
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				line := sc.Text()
				seen = append(seen, line)
				if strings.Contains(line, "waiting for") {
					for _, w := range want {
						if !strings.Contains(line, w) {
							t.Fatalf("the script says %q; want it to contain %q", line, w)
						}
					}
					// It blocks after saying so: the lock is still held
					// and it has not gone on.
					return
				}
			}
			t.Fatalf("the script ended without saying what it waits for; its stderr:\n%s", strings.Join(seen, "\n"))
		})
	}
}
