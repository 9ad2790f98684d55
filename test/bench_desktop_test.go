package sandpit_test

import (
	"bytes"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// desktopStart is what @e2b/desktop's Sandbox.create() runs once the
// sandbox exists: Xvfb on :0 (waited for with xdpyinfo), then Xfce, waited
// for until its session, window manager and desktop run.
const desktopStart = `export DISPLAY=:0
setsid Xvfb :0 -ac -screen 0 1024x768x24 -nolisten tcp </dev/null >/dev/null 2>&1 &
until xdpyinfo >/dev/null 2>&1; do sleep 0.05; done
setsid startxfce4 </dev/null >/dev/null 2>&1 &
until pgrep -x xfce4-session >/dev/null && pgrep -x xfwm4 >/dev/null && pgrep -x xfdesktop >/dev/null; do sleep 0.05; done
`

// desktopShot is what screenshot() runs: scrot to a file, which the
// caller then reads.
const desktopShot = "DISPLAY=:0 scrot --overwrite --pointer /tmp/bench-shot.png"

// BenchmarkDesktop times what a computer-use agent waits for: a create of
// the desktop template until its first screenshot is read back (the
// display and the session started as @e2b/desktop starts them), cold (no
// pool) and from the warm pool (refilled between creates, outside the timed
// section), and then the round trip of one more screenshot (capture and
// read). Needs the image (scripts/build-desktop-image.sh):
//
//	go test -run '^$' -bench Desktop -benchtime 10x ./test/
func BenchmarkDesktop(b *testing.B) {
	if err := exec.Command("docker", "image", "inspect", "sandpit/desktop:latest").Run(); err != nil {
		b.Skip("sandpit/desktop:latest is not built (scripts/build-desktop-image.sh)")
	}
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"cold", nil},
		{"warm", []string{"--warm-pool", "desktop=2"}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			d := harness.Start(b, sandpitBin, harness.Options{Args: mode.args})
			c := d.Client()
			warm := mode.args != nil
			shot := func(id string) {
				if res, err := c.Exec(b.Context(), id, client.ExecRequest{Cmd: "sh", Args: []string{"-c", desktopShot}, TimeoutS: 30}); err != nil || res.ExitCode != 0 {
					b.Fatalf("screenshot: %+v %v", res, err)
				}
				var png bytes.Buffer
				if err := c.ReadFile(b.Context(), id, "/tmp/bench-shot.png", &png); err != nil || !bytes.HasPrefix(png.Bytes(), []byte("\x89PNG")) {
					b.Fatalf("reading the screenshot: %d bytes, %v", png.Len(), err)
				}
			}
			first := make([]time.Duration, 0, b.N)
			again := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if warm {
					awaitPool(b, d, 1, 180*time.Second)
				}
				b.StartTimer()
				start := time.Now()
				sb, err := c.Create(b.Context(), apitypes.CreateRequest{Template: "desktop", Labels: map[string]string{"bench": "desktop", "i": strconv.Itoa(i)}})
				if err != nil {
					b.Fatal(err)
				}
				if res, err := c.Exec(b.Context(), sb.ID, client.ExecRequest{Cmd: "sh", Args: []string{"-c", desktopStart}, TimeoutS: 120}); err != nil || res.ExitCode != 0 {
					b.Fatalf("starting the desktop: %+v %v", res, err)
				}
				shot(sb.ID)
				first = append(first, time.Since(start))
				t0 := time.Now()
				shot(sb.ID)
				again = append(again, time.Since(t0))
				b.StopTimer()
				_ = c.Delete(b.Context(), sb.ID)
				b.StartTimer()
			}
			b.StopTimer()
			harness.ReportPercentiles(b, "first-screenshot", first)
			harness.ReportPercentiles(b, "screenshot-round-trip", again)
		})
	}
}
