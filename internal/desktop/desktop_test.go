package desktop

import (
	"strings"
	"testing"
)

// TestScripts: a start starts only what is not running, under
// the lock, the display first; a stop ends the processes last started
// first.
func TestScripts(t *testing.T) {
	start := StartScript("")
	for _, want := range []string{`flock 9`, `[ -n "$(pid_of Xvfb)" ] || launch xvfb Xvfb :0`, `[ -n "$(pid_of x11vnc)" ] || launch x11vnc x11vnc -display :0`} {
		if !strings.Contains(start, want) {
			t.Errorf("start script lacks %q:\n%s", want, start)
		}
	}
	if i, j := strings.Index(start, "launch xvfb"), strings.Index(start, "launch xfce4"); i < 0 || j < i {
		t.Errorf("start script starts the session before the display:\n%s", start)
	}
	if !strings.HasSuffix(start, "exec 9>&-\n") {
		t.Errorf("start script keeps the lock to its end: a script run after it would hold it:\n%s", start)
	}
	stop := StopScript("")
	if i, j := strings.Index(stop, "pkill -x websockify"), strings.Index(stop, "pkill -x Xvfb"); i < 0 || j < i {
		t.Errorf("stop script ends the display before the stream:\n%s", stop)
	}
	if one := StopScript("x11vnc"); strings.Contains(one, "Xvfb") {
		t.Errorf("stopping x11vnc touches Xvfb:\n%s", one)
	}
}
