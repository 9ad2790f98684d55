package sandpit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestPythonSDKInstallsOffline: the Python SDK installs with pip into a
// virtualenv made by the python3 on PATH, with no package index and, where
// the test may make one, no network at all: its build backend is its own,
// in the standard library, so neither setuptools nor wheel is needed.
func TestPythonSDKInstallsOffline(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if testenv.InCI() {
			t.Fatal("no python3 on PATH: .ci/run installs it")
		}
		t.Skip("no python3 on PATH")
	}
	t.Parallel()
	dir := t.TempDir()
	// A copy, so that the build writes nothing into the checkout.
	sdk := filepath.Join(dir, "sdk")
	if out, err := exec.Command("cp", "-r", filepath.Join("..", "sdk", "python"), sdk).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	venv := filepath.Join(dir, "venv")
	if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Fatalf("%s -m venv: %v\n%s", py, err, out)
	}
	// The venv's own pip, as a user has it: take away what Debian's
	// python3-wheel would add, so the test holds wherever it runs.
	pip := []string{filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--disable-pip-version-check", sdk}
	if _, err := exec.LookPath("unshare"); err == nil && os.Geteuid() == 0 {
		// No network namespace but loopback: nothing outside is reachable.
		pip = append([]string{"unshare", "--net", "--"}, pip...)
	}
	cmd := exec.Command(pip[0], pip[1:]...)
	cmd.Env = append(os.Environ(), "PIP_NO_INDEX=1", "PIP_FIND_LINKS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(pip, " "), err, out)
	}
	out, err := exec.Command(filepath.Join(venv, "bin", "python"), "-c",
		"import sandpit, sandpit.aio, sys; c = sandpit.Sandpit('http://127.0.0.1:1', 'token'); print(sys.version_info >= (3, 9), type(c).__name__)").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "True Sandpit" {
		t.Fatalf("import after install: %v %q", err, out)
	}
	if _, err := exec.Command(filepath.Join(venv, "bin", "python"), "-c", "import wheel").CombinedOutput(); err == nil {
		t.Log("this venv has the wheel package; the install did not need it")
	}
}
