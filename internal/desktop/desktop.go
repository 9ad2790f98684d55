// Package desktop is what every surface runs inside a sandbox to drive its
// desktop (the `desktop` template, images/desktop): the shell scripts that
// start and stop the X server, the session and the VNC stream, take
// screenshots and send pointer and key events with the X11 command-line
// tools, and the parsing of what those tools print. The surfaces run the
// scripts through the sandbox's agent (Daytona's computer use, the MCP
// tools); this package runs nothing itself, so it depends on nothing.
//
// Every script starts with Prelude and takes its variable input as
// positional parameters ("$1"...), never spliced into its text.
package desktop

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The desktop's settings, Daytona's defaults: display :0 at 1024x768, the
// VNC server on 5901 and noVNC on 6080. (@e2b/desktop starts its own
// display and stream, on the same display with VNC on 5900.)
const (
	Display    = ":0"
	Resolution = "1024x768"
	VNCPort    = "5901"
	NoVNCPort  = "6080"
)

// ExitNoDisplay is the exit status of a script that found no display
// (need_display in Prelude).
const ExitNoDisplay = 3

// Process is one of the desktop's processes: its name (Daytona's), the
// process name it runs as (what pgrep finds), and the command that starts
// it. Priority is its place in the start order (Daytona reports it).
type Process struct {
	Name, Exe, Start string
	Priority         int
}

// Processes are the desktop's processes in their start order. The session
// gets a D-Bus session bus of its own from startxfce4.
var Processes = []Process{
	{"xvfb", "Xvfb", "Xvfb " + Display + " -screen 0 " + Resolution + "x24 -nolisten tcp", 100},
	{"xfce4", "xfce4-session", "startxfce4", 200},
	{"x11vnc", "x11vnc", "x11vnc -display " + Display + " -forever -shared -rfbport " + VNCPort + " -nopw", 300},
	{"novnc", "websockify", "/opt/noVNC/utils/novnc_proxy --vnc localhost:" + VNCPort + " --listen " + NoVNCPort + " --web /opt/noVNC", 400},
}

// Lookup finds a process by name.
func Lookup(name string) (Process, bool) {
	for _, p := range Processes {
		if p.Name == name {
			return p, true
		}
	}
	return Process{}, false
}

// Prelude is the start of every script: the display, the directory of
// the processes' output (~/.daytona/computeruse, where Daytona keeps it),
// and the helpers.
const Prelude = `set -u
export DISPLAY=` + Display + `
dir="$HOME/.daytona/computeruse"
mkdir -p "$dir"
pid_of() { pgrep -x -o "$1" || true; }
# launch NAME COMMAND starts COMMAND in a session of its own, detached from
# the script and from the lock (fd 9), its output in NAME's log files.
launch() { name=$1; shift; setsid sh -c "exec $*" >>"$dir/$name.log" 2>>"$dir/$name.err" </dev/null 9>&- & }
need_display() { xdpyinfo >/dev/null 2>&1 || { echo "the display ` + Display + ` is not running: start the desktop first" >&2; exit 3; }; }
`

// StatusScript prints "name pid" (pid empty when not running) for each
// process.
func StatusScript() string {
	var b strings.Builder
	for _, p := range Processes {
		fmt.Fprintf(&b, "echo %s $(pid_of %s)\n", p.Name, p.Exe)
	}
	return b.String()
}

// StartScript starts each process (or only the one named) that is not
// running, in order, under a lock so that concurrent starts make one of
// each: the display first (waited for), then the session and the servers,
// waited for until their ports listen.
func StartScript(only string) string {
	var b strings.Builder
	b.WriteString("exec 9>\"$dir/.lock\"\nflock 9\n")
	for _, p := range Processes {
		if only != "" && p.Name != only {
			continue
		}
		fmt.Fprintf(&b, "[ -n \"$(pid_of %s)\" ] || launch %s %s\n", p.Exe, p.Name, p.Start)
		if p.Name == "xvfb" {
			b.WriteString("i=0; until xdpyinfo >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 200 ] || { echo 'Xvfb did not start' >&2; exit 1; }; sleep 0.1; done\n")
		}
	}
	if only == "" || only == "x11vnc" || only == "novnc" {
		b.WriteString("i=0; until netstat -tln | grep -q ':" + VNCPort + " ' && netstat -tln | grep -q ':" + NoVNCPort + " '; do i=$((i+1)); [ $i -lt 200 ] || break; sleep 0.1; done\n")
	}
	b.WriteString("exec 9>&-\n")
	return b.String()
}

// StopScript ends the processes (all, or only the one named), the last
// started first, and waits for them to go.
func StopScript(only string) string {
	var b strings.Builder
	b.WriteString("exec 9>\"$dir/.lock\"\nflock 9\n")
	for i := len(Processes) - 1; i >= 0; i-- {
		p := Processes[i]
		if only != "" && p.Name != only {
			continue
		}
		fmt.Fprintf(&b, "pkill -x %s || true\n", p.Exe)
		fmt.Fprintf(&b, "i=0; while [ -n \"$(pid_of %s)\" ] && [ $i -lt 50 ]; do i=$((i+1)); sleep 0.1; done; [ -z \"$(pid_of %s)\" ] || pkill -KILL -x %s || true\n", p.Exe, p.Exe, p.Exe)
	}
	b.WriteString("exec 9>&-\n")
	return b.String()
}

// MouseLocation is the script text that prints the pointer's position on
// stderr as xdotool's shell assignments (X=..., Y=...).
const MouseLocation = "xdotool getmouselocation --shell >&2\n"

// Position is a point on the screen.
type Position struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// ErrNoPosition: the tool printed no pointer position.
var ErrNoPosition = errors.New("no pointer position")

// ParseLocation reads X= and Y= from xdotool's --shell output.
func ParseLocation(b []byte) (Position, error) {
	var p Position
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			continue
		}
		switch k {
		case "X":
			p.X, found = n, found|1
		case "Y":
			p.Y, found = n, found|2
		}
	}
	if found != 3 {
		return p, fmt.Errorf("%w in %q", ErrNoPosition, string(b))
	}
	return p, nil
}

// ErrBadKey: a key name that is no key.
var ErrBadKey = errors.New("unknown key")

// keyNames maps the key names agents use (Daytona's, lower case) to X
// keysym names; a name not listed passes as it is (a letter, a digit, or
// already a keysym such as "Return").
var keyNames = map[string]string{
	"enter": "Return", "return": "Return", "tab": "Tab", "esc": "Escape", "escape": "Escape",
	"backspace": "BackSpace", "delete": "Delete", "del": "Delete", "insert": "Insert", "space": "space",
	"up": "Up", "down": "Down", "left": "Left", "right": "Right", "home": "Home", "end": "End",
	"pageup": "Page_Up", "page_up": "Page_Up", "pagedown": "Page_Down", "page_down": "Page_Down",
	"ctrl": "ctrl", "control": "ctrl", "alt": "alt", "shift": "shift", "cmd": "super", "command": "super",
	"super": "super", "win": "super", "meta": "super", "capslock": "Caps_Lock", "printscreen": "Print",
	"menu": "Menu",
}

var keyName = regexp.MustCompile(`^[A-Za-z0-9_]{1,32}$`)

// Keysym translates one key name, or refuses it.
func Keysym(k string) (string, error) {
	k = strings.TrimSpace(k)
	if s, ok := keyNames[strings.ToLower(k)]; ok {
		return s, nil
	}
	if len(k) > 1 && (k[0] == 'f' || k[0] == 'F') {
		if n, err := strconv.Atoi(k[1:]); err == nil && n >= 1 && n <= 24 {
			return "F" + k[1:], nil
		}
	}
	if len([]rune(k)) == 1 || keyName.MatchString(k) {
		return k, nil
	}
	return "", fmt.Errorf("%w %q", ErrBadKey, k)
}

// Chord joins keys into xdotool's "mod+mod+key".
func Chord(keys []string) (string, error) {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		s, err := Keysym(k)
		if err != nil {
			return "", err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return "", fmt.Errorf("%w: a key is required", ErrBadKey)
	}
	return strings.Join(out, "+"), nil
}

// ButtonNumber is X's number for a button name (left, middle, right;
// empty is left), or "" for a name that is no button.
func ButtonNumber(name string) string {
	return map[string]string{"": "1", "left": "1", "middle": "2", "right": "3"}[strings.ToLower(name)]
}

// ScrollButton is X's wheel button for a direction (4 up, 5 down, 6 left,
// 7 right), or "".
func ScrollButton(direction string) string {
	return map[string]string{"up": "4", "down": "5", "left": "6", "right": "7"}[strings.ToLower(direction)]
}

// ScreenshotScript captures the screen (or the region "$2", x,y,w,h) with
// scrot, the pointer drawn when "$1" is 1, then re-encodes it with ffmpeg
// when "$3" (png, jpeg or webp) and "$4" (quality, 1-100) and "$5" (scale)
// ask for it, prints the image on stdout and the pointer's position on
// stderr (MouseLocation).
const ScreenshotScript = `need_display
f=$(mktemp -d /tmp/.computeruse-shot-XXXXXX)
trap 'rm -rf "$f"' EXIT
opts=""
[ "$1" = 1 ] && opts="--pointer"
if [ -n "$2" ]; then scrot --overwrite $opts --autoselect "$2" "$f/shot.png" >&2; else scrot --overwrite $opts "$f/shot.png" >&2; fi
out="$f/shot.png"
if [ -n "$3" ]; then
	q=$4; filter="scale=trunc(iw*$5/2)*2:trunc(ih*$5/2)*2"
	case "$3" in
	png) ffmpeg -loglevel error -i "$f/shot.png" -vf "$filter" "$f/out.png" && out="$f/out.png" ;;
	jpeg) ffmpeg -loglevel error -i "$f/shot.png" -vf "$filter" -q:v $((2 + (100 - q) * 29 / 100)) "$f/out.jpg" && out="$f/out.jpg" ;;
	webp) ffmpeg -loglevel error -i "$f/shot.png" -vf "$filter" -quality "$q" "$f/out.webp" && out="$f/out.webp" ;;
	esac || exit 1
fi
cat "$out"
` + MouseLocation
