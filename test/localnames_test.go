package sandpit_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/testenv/testkit"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestPreviewHostsResolveForEveryProgram: after the README's set-up
// (libnss-myhostname, which resolves *.localhost through glibc), the
// preview URL the daemon hands out works from the programs agents run, not
// only from a browser that special-cases *.localhost: curl, Node's fetch
// and Python's urllib, each resolving the name itself.
func TestPreviewHostsResolveForEveryProgram(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command("getent", "ahosts", "probe-8080.localhost").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("*.localhost does not resolve on this machine (getent: %v %s): the README's set-up installs libnss-myhostname", err, out)
		}
		t.Skip("*.localhost does not resolve here; the README's set-up (libnss-myhostname) makes it")
	}
	d := harness.Start(t, sandpitBin, harness.Options{})
	c := d.Client()
	ctx := ctxFor(t, 2*time.Minute)
	id := newSandbox(t, ctx, c)
	startHTTPD(t, ctx, c, id, 8080, "resolved by name")
	p := mustExpose(t, ctx, d, id, 8080, "http", http.StatusCreated)
	if !strings.Contains(p.PublicURL, ".localhost:") {
		t.Fatalf("public URL %s is not a *.localhost name", p.PublicURL)
	}
	testkit.Eventually(t, 10*time.Second, "preview URL", func() error { return servesPage(ctx, d, p.PublicURL, "resolved by name") })

	script := filepath.Join(t.TempDir(), "fetch.py")
	if err := os.WriteFile(script, []byte("import sys, urllib.request\nprint(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  []string
	}{
		{"curl", []string{"curl", "-sS", "--fail", "--max-time", "10", p.PublicURL}},
		{"node fetch", []string{"node", "-e", "fetch(process.argv[1]).then(r => r.text()).then(t => console.log(t), e => { console.error(e.cause || e); process.exit(1) })", p.PublicURL}},
		{"python urllib", []string{"python3", script, p.PublicURL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.cmd[0]); err != nil {
				t.Fatalf("%s is not installed: %v", tc.cmd[0], err)
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(cctx, tc.cmd[0], tc.cmd[1:]...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "resolved by name") {
				t.Fatalf("%s %s: %v\n%s", tc.name, p.PublicURL, err, out)
			}
		})
	}
}

// TestInstallDryRunUnitVerifies: `sandpit install --dry-run` prints a unit
// that systemd's own checker accepts, and changes nothing; without
// --dry-run (and --enable=false) it writes the unit and a config file that
// serve reads.
func TestInstallDryRunUnitVerifies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	unit, config := filepath.Join(dir, "sandpit.service"), filepath.Join(dir, "etc", "sandpit.yaml")
	dry := exec.Command(sandpitBin, "install", "--dry-run", "--unit", unit, "--config", config)
	// No sandpit on PATH: the unit runs this executable.
	dry.Env = append(os.Environ(), "PATH="+t.TempDir())
	out, err := dry.Output()
	if err != nil {
		t.Fatalf("install --dry-run: %v", err)
	}
	if _, err := os.Stat(unit); !os.IsNotExist(err) {
		t.Fatalf("a dry run wrote %s", unit)
	}
	for _, want := range []string{"ExecStart=" + sandpitBin + " serve --config " + config, "WantedBy=multi-user.target"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("unit lacks %q:\n%s", want, out)
		}
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("systemd-analyze is not installed (.ci/run installs systemd): %v", err)
		}
		t.Skip("systemd-analyze not installed")
	}
	check := filepath.Join(t.TempDir(), "sandpit.service")
	if err := os.WriteFile(check, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := exec.Command("systemd-analyze", "verify", check).CombinedOutput(); err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s\n%s", err, v, out)
	}

	if out, err := exec.Command(sandpitBin, "install", "--enable=false", "--unit", unit, "--config", config).CombinedOutput(); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	if b, err := os.ReadFile(unit); err != nil || !strings.Contains(string(b), "--config "+config) {
		t.Fatalf("unit %s: %v %s", unit, err, b)
	}
	// serve reads the written config (all comments) and then refuses a bad
	// flag of its own, which shows it got past the file.
	res, err := exec.Command(sandpitBin, "serve", "--config", config, "--engine-timeout", "0s").CombinedOutput()
	if err == nil || !strings.Contains(string(res), "--engine-timeout") {
		t.Fatalf("serve --config %s: %v %s", config, err, res)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("lisen: 127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := exec.Command(sandpitBin, "serve", "--config", bad).CombinedOutput(); err == nil || !strings.Contains(string(res), fmt.Sprintf("unknown key %q", "lisen")) {
		t.Fatalf("serve with an unknown key: %v %s", err, res)
	}
}

// TestServeWarnsWhenPreviewHostsDoNotResolve: a --domain whose names this
// machine cannot resolve makes serve say so at start, with the fix, and
// names the token file without printing the token.
func TestServeWarnsWhenPreviewHostsDoNotResolve(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--domain", "sandpit-nowhere.invalid"}})
	testkit.Eventually(t, 20*time.Second, "the warning", func() error {
		if logs := d.Logs(); !strings.Contains(logs, "preview hosts do not resolve on this machine") || !strings.Contains(logs, "sandpit-probe-8080.sandpit-nowhere.invalid") {
			return fmt.Errorf("not in the log yet")
		}
		return nil
	})
	if strings.Contains(d.Logs(), d.Token) {
		t.Fatal("the log holds the admin token")
	}
	// The README's own domain resolves once its set-up ran: no warning.
	if _, err := exec.Command("getent", "ahosts", "probe-8080.localhost").CombinedOutput(); err == nil {
		ok := harness.Start(t, sandpitBin, harness.Options{})
		if _, err := ok.Client().Status(ctxFor(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, "the check's answer", func() error {
			if !strings.Contains(ok.Logs(), "preview hosts resolve on this machine") {
				return fmt.Errorf("not in the log yet")
			}
			return nil
		})
		if strings.Contains(ok.Logs(), "preview hosts do not resolve") {
			t.Fatalf("warned about a domain that resolves:\n%s", ok.Logs())
		}
	}
}

// TestInstallRunsSandpitOnPath: run from a checkout's bin/sandpit, install
// writes a unit that runs the sandpit on PATH, where the README's set-up
// installs it, so that rebuilding the checkout does not change the service.
func TestInstallRunsSandpitOnPath(t *testing.T) {
	t.Parallel()
	pathDir := t.TempDir()
	installed := filepath.Join(pathDir, "sandpit")
	if err := os.Symlink(sandpitBin, installed); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "sandpit.yaml")
	cmd := exec.Command(sandpitBin, "install", "--dry-run", "--config", config)
	cmd.Env = append(os.Environ(), "PATH="+pathDir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("install --dry-run: %v %s", err, stderr.String())
	}
	if want := "ExecStart=" + installed + " serve --config " + config + "\n"; !strings.Contains(string(out), want) {
		t.Fatalf("unit lacks %q:\n%s", want, out)
	}
	if !strings.Contains(stderr.String(), "the sandpit on PATH") {
		t.Errorf("install did not say which binary the unit runs: %q", stderr.String())
	}
}
