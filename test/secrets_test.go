package sandpit_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCorruptSecretFiles: an empty or short token or instance file in the
// data directory (a disk that lost a write, an operator's editor) stops the
// daemon with one line that names the file: never a crash, never a new
// value silently replacing one that clients or containers depend on.
func TestCorruptSecretFiles(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file, content string
		withToken           bool // --token given, so the token file is not read
	}{
		{"empty token", "token", "", false},
		{"empty instance", "instance", "", true},
		{"3-byte instance", "instance", "abc", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--proxy-listen", "127.0.0.1:0"}
			if tc.withToken {
				args = append(args, "--token", "x")
			}
			cmd := exec.CommandContext(ctx, sandpitBin, args...)
			cmd.Env = append(os.Environ(), "SANDPIT_TOKEN=")
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("daemon started on a corrupt %s file:\n%s", tc.file, out)
			}
			if err == nil {
				t.Fatalf("daemon exited 0 on a corrupt %s file:\n%s", tc.file, out)
			}
			msg := strings.TrimSpace(string(out))
			if strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine ") {
				t.Fatalf("daemon crashed:\n%s", msg)
			}
			if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, path) {
				t.Fatalf("want one line naming %s, got:\n%s", path, msg)
			}
			t.Logf("%s: %s", tc.name, msg)
		})
	}
}
