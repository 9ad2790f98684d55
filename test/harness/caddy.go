package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// CaddyFlavor names the two Caddy builds the tests run against.
type CaddyFlavor string

const (
	// CaddyDebian is Debian's caddy package (2.6): HTTP routes only, so
	// sandpit serves TCP forwards itself.
	CaddyDebian CaddyFlavor = "debian"
	// CaddyL4 is Caddy built with caddy-l4 from tools/caddy-l4 by
	// scripts/build-caddy-l4.sh: TCP forwards become layer4 servers.
	CaddyL4 CaddyFlavor = "l4"
)

// caddyBins caches the caddy-l4 build for the test process: the script is
// fast when the binary is cached, but one call is enough.
var caddyBins sync.Map

// CaddyBinary returns the path of a Caddy of the given flavor. Debian's comes
// from PATH; the caddy-l4 one from SANDPIT_CADDY_L4 (scripts/test.sh sets it)
// or else from running the build script. Missing, the test is skipped, except
// in CI (CI=true), where it fails.
func CaddyBinary(t testing.TB, flavor CaddyFlavor) string {
	t.Helper()
	missing := func(format string, args ...any) string {
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
		return ""
	}
	if flavor == CaddyDebian {
		bin, err := exec.LookPath("caddy")
		if err != nil {
			return missing("caddy not installed (apt-get install caddy): %v", err)
		}
		return bin
	}
	if bin := os.Getenv("SANDPIT_CADDY_L4"); bin != "" {
		return bin
	}
	if v, ok := caddyBins.Load(flavor); ok {
		return v.(string)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "scripts", "build-caddy-l4.sh")).Output()
	if err != nil {
		return missing("build caddy-l4: %v", err)
	}
	bin := strings.TrimSpace(string(out))
	caddyBins.Store(flavor, bin)
	return bin
}

// Caddy is one Caddy process a test runs: its own admin port, storage and
// config directories, started with a config that holds only the admin
// endpoint and storage, so it begins empty as a fresh Caddy does.
type Caddy struct {
	t         testing.TB
	bin       string
	Dir       string
	AdminAddr string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs *bytes.Buffer
}

// StartCaddy runs a Caddy and stops it, by pid, when the test ends.
func StartCaddy(t testing.TB, flavor CaddyFlavor) *Caddy {
	t.Helper()
	c := &Caddy{t: t, bin: CaddyBinary(t, flavor), Dir: t.TempDir(), AdminAddr: "127.0.0.1:" + strconv.Itoa(FreePort(t)), logs: &bytes.Buffer{}}
	cfg := map[string]any{
		"admin":   map[string]any{"listen": c.AdminAddr, "config": map[string]any{"persist": false}},
		"storage": map[string]any{"module": "file_system", "root": filepath.Join(c.Dir, "storage")},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "WARN"}}},
	}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(c.Dir, "caddy.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("caddy log:\n%s", c.Logs())
		}
	})
	c.Start()
	return c
}

// AdminURL is the base URL of the admin API.
func (c *Caddy) AdminURL() string { return "http://" + c.AdminAddr }

// RootCA is the path of the internal CA's root certificate.
func (c *Caddy) RootCA() string {
	return filepath.Join(c.Dir, "storage", "pki", "authorities", "local", "root.crt")
}

// Start runs the process (again) with the empty config and waits for the
// admin API.
func (c *Caddy) Start() {
	c.t.Helper()
	cmd := exec.Command(c.bin, "run", "--config", filepath.Join(c.Dir, "caddy.json"))
	// Its own HOME and XDG directories: nothing is read from or written to
	// the user's, and parallel Caddys share nothing.
	cmd.Env = append(os.Environ(), "HOME="+c.Dir, "XDG_DATA_HOME="+filepath.Join(c.Dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(c.Dir, "config"))
	c.mu.Lock()
	cmd.Stdout, cmd.Stderr = lockedWriter{&c.mu, c.logs}, lockedWriter{&c.mu, c.logs}
	c.mu.Unlock()
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.cmd, c.done = cmd, done
	c.mu.Unlock()
	awaitHTTP(c.t, c.AdminURL()+"/config/", done, 30*time.Second, "caddy", c.Logs)
}

// Stop ends the process with SIGTERM (SIGKILL after 20 s) and waits.
func (c *Caddy) Stop() {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	stopProcess(cmd, done, syscall.SIGTERM, 20*time.Second)
}

// Logs returns what Caddy wrote.
func (c *Caddy) Logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.String()
}

// Admin sends one admin API request and decodes a JSON answer into out.
func (c *Caddy) Admin(method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.AdminURL()+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	// Caddy restarts its admin server on every config load, closing the
	// connections it kept open. A PUT or POST sent on such a connection
	// fails, and net/http does not resend those, so each call gets a
	// connection of its own.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil && len(bytes.TrimSpace(b)) > 0 {
		return resp.StatusCode, json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
