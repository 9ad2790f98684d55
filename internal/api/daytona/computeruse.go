package daytona

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/desktop"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// Daytona's computer use (/toolbox/{id}/computeruse/*, the SDK's
// sandbox.computerUse): a desktop in the sandbox driven through the toolbox.
// Daytona's own daemon links an X11 library; here every call runs the X11
// command-line tools inside the sandbox through the agent (xdotool for the
// pointer, the keys and the windows, scrot and ffmpeg for screenshots,
// xrandr for the display), so it needs only an image that has them: the
// `desktop` snapshot (images/desktop). Daytona's defaults are kept: display
// :0 at 1024x768, the VNC server on 5901 and noVNC on 6080, each process's
// output under ~/.daytona/computeruse.

// cuTimeout bounds one call's commands in the sandbox; start waits for the
// display and the servers within it.
const cuTimeout = 60 * time.Second

// cuRun runs script (after the prelude) in the sandbox with args as its
// positional parameters, and returns what it printed on stdout and stderr.
// A script that exits 3 found no display: a 409 saying to start computer
// use; any other failure is a 400 carrying its stderr.
func (h *toolboxAPI) cuRun(ctx context.Context, c *sandboxConn, script string, args ...string) (stdout, stderr []byte, err error) {
	cfg := &process.ProcessConfig{Cmd: "/bin/sh", Args: append([]string{"-c", desktop.Prelude + script, "sh"}, args...), Envs: map[string]string{"DISPLAY": desktop.Display}}
	res, err := h.runProc(ctx, c.Agent, cfg, cuTimeout)
	if err != nil {
		return nil, nil, err
	}
	msg := strings.TrimSpace(string(res.stderr))
	switch res.exitCode {
	case 0:
		return res.stdout, res.stderr, nil
	case desktop.ExitNoDisplay:
		return nil, nil, newProblem(http.StatusConflict, "%s", msg)
	default:
		if msg == "" {
			msg = strings.TrimSpace(string(res.stdout))
		}
		return nil, nil, newProblem(http.StatusBadRequest, "computer use: %s (exit %d)", msg, res.exitCode)
	}
}

// cuHandler resolves the sandbox and runs op, which answers on success.
func (h *toolboxAPI) cuHandler(op func(w http.ResponseWriter, r *http.Request, c *sandboxConn) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := h.conn(r)
		if err == nil {
			err = op(w, r, c)
		}
		if err != nil {
			WriteError(w, r, err)
		}
	}
}

// CUProcessStatus is one process in a start's, stop's or status's answer.
type CUProcessStatus struct {
	AutoRestart bool `json:"autoRestart"`
	Pid         *int `json:"pid,omitempty"`
	Priority    int  `json:"priority"`
	Running     bool `json:"running"`
}

// cuStatus reads which of the processes run.
func (h *toolboxAPI) cuStatus(ctx context.Context, c *sandboxConn) (map[string]CUProcessStatus, error) {
	out, _, err := h.cuRun(ctx, c, desktop.StatusScript())
	if err != nil {
		return nil, err
	}
	st := map[string]CUProcessStatus{}
	for _, p := range desktop.Processes {
		st[p.Name] = CUProcessStatus{Priority: p.Priority}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, pidText, _ := strings.Cut(strings.TrimSpace(line), " ")
		s, ok := st[name]
		if !ok {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(pidText)); err == nil {
			s.Pid, s.Running = &pid, true
		}
		st[name] = s
	}
	return st, nil
}

// CUStartStopResponse answers POST /computeruse/start and /stop.
type CUStartStopResponse struct {
	Message string                     `json:"message"`
	Status  map[string]CUProcessStatus `json:"status"`
}

func (h *toolboxAPI) cuStart(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	if _, _, err := h.cuRun(r.Context(), c, desktop.StartScript("")); err != nil {
		return err
	}
	st, err := h.cuStatus(r.Context(), c)
	if err != nil {
		return err
	}
	var failed []string
	for _, p := range desktop.Processes {
		if !st[p.Name].Running {
			failed = append(failed, p.Name)
		}
	}
	if len(failed) > 0 {
		return newProblem(http.StatusInternalServerError, "computer use: failed to start %s (see GET /computeruse/process/{name}/errors)", strings.Join(failed, ", "))
	}
	api.WriteJSON(w, http.StatusOK, CUStartStopResponse{Message: "Computer use processes started successfully", Status: st})
	return nil
}

func (h *toolboxAPI) cuStop(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	if _, _, err := h.cuRun(r.Context(), c, desktop.StopScript("")); err != nil {
		return err
	}
	st, err := h.cuStatus(r.Context(), c)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, CUStartStopResponse{Message: "Computer use processes stopped successfully", Status: st})
	return nil
}

// cuGetStatus answers Daytona's summary: active when every process runs,
// partial when some do, inactive when none does. The SDK's getStatus()
// asks GET /process-status for it; GET /status answers the same.
func (h *toolboxAPI) cuGetStatus(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	st, err := h.cuStatus(r.Context(), c)
	if err != nil {
		return err
	}
	n := 0
	for _, s := range st {
		if s.Running {
			n++
		}
	}
	status := "partial"
	switch n {
	case 0:
		status = "inactive"
	case len(desktop.Processes):
		status = "active"
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"status": status})
	return nil
}

// cuNamed resolves the {processName} path value.
func cuNamed(r *http.Request) (desktop.Process, error) {
	name := r.PathValue("processName")
	p, ok := desktop.Lookup(name)
	if !ok {
		return p, newProblem(http.StatusNotFound, "process %s not found (computer use runs xvfb, xfce4, x11vnc and novnc)", name)
	}
	return p, nil
}

func (h *toolboxAPI) cuProcessStatus(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	p, err := cuNamed(r)
	if err != nil {
		return err
	}
	st, err := h.cuStatus(r.Context(), c)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"processName": p.Name, "running": st[p.Name].Running})
	return nil
}

func (h *toolboxAPI) cuRestart(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	p, err := cuNamed(r)
	if err != nil {
		return err
	}
	if _, _, err := h.cuRun(r.Context(), c, desktop.StopScript(p.Name)+"exec 9>&-\n"+desktop.StartScript(p.Name)); err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"message": "Process " + p.Name + " restarted successfully", "processName": p.Name})
	return nil
}

// cuProcessOutput answers a process's log (its stdout) or errors (its
// stderr) file.
func (h *toolboxAPI) cuProcessOutput(field, ext string) func(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	return func(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
		p, err := cuNamed(r)
		if err != nil {
			return err
		}
		out, _, err := h.cuRun(r.Context(), c, `cat "$dir/$1" 2>/dev/null || true`, p.Name+ext)
		if err != nil {
			return err
		}
		api.WriteJSON(w, http.StatusOK, map[string]string{"processName": p.Name, field: string(out)})
		return nil
	}
}

// parseLocation reads the pointer's position a script left on stderr.
func parseLocation(b []byte) (desktop.Position, error) {
	p, err := desktop.ParseLocation(b)
	if err != nil {
		return p, fmt.Errorf("%w: computer use: %v", service.ErrRuntime, err)
	}
	return p, nil
}

// cuPointer runs script (which must leave the pointer's position on
// stderr, see desktop.MouseLocation) and answers the position.
func (h *toolboxAPI) cuPointer(w http.ResponseWriter, r *http.Request, c *sandboxConn, script string, args ...string) error {
	_, errOut, err := h.cuRun(r.Context(), c, "need_display\n"+script+desktop.MouseLocation, args...)
	if err != nil {
		return err
	}
	pos, err := parseLocation(errOut)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, pos)
	return nil
}

func (h *toolboxAPI) cuMousePosition(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	return h.cuPointer(w, r, c, "")
}

// MouseRequest is the body of the mouse calls: move and click take x and
// y (click also button and double), drag its start and end, scroll a
// direction and an amount.
type MouseRequest struct {
	X         int    `json:"x"`
	Y         int    `json:"y"`
	Button    string `json:"button"`
	Double    bool   `json:"double"`
	StartX    int    `json:"startX"`
	StartY    int    `json:"startY"`
	EndX      int    `json:"endX"`
	EndY      int    `json:"endY"`
	Direction string `json:"direction"`
	Amount    int    `json:"amount"`
}

// decodeMouse decodes the body and checks its coordinates.
func decodeMouse(r *http.Request) (MouseRequest, error) {
	var req MouseRequest
	if err := api.DecodeJSON(r, &req, false); err != nil {
		return req, err
	}
	for _, v := range []int{req.X, req.Y, req.StartX, req.StartY, req.EndX, req.EndY} {
		if v < 0 || v > 1<<15 {
			return req, badRequest("coordinates must be between 0 and 32768")
		}
	}
	return req, nil
}

// buttonNumber is X's number for a Daytona button name.
func buttonNumber(name string) (string, error) {
	if b := desktop.ButtonNumber(name); b != "" {
		return b, nil
	}
	return "", badRequest("button must be left, middle or right, not %q", name)
}

func (h *toolboxAPI) cuMouseMove(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	req, err := decodeMouse(r)
	if err != nil {
		return err
	}
	return h.cuPointer(w, r, c, "xdotool mousemove --sync \"$1\" \"$2\"\n", strconv.Itoa(req.X), strconv.Itoa(req.Y))
}

func (h *toolboxAPI) cuMouseClick(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	req, err := decodeMouse(r)
	if err != nil {
		return err
	}
	b, err := buttonNumber(req.Button)
	if err != nil {
		return err
	}
	repeat := "1"
	if req.Double {
		repeat = "2"
	}
	return h.cuPointer(w, r, c, "xdotool mousemove --sync \"$1\" \"$2\" click --repeat \"$4\" \"$3\"\n",
		strconv.Itoa(req.X), strconv.Itoa(req.Y), b, repeat)
}

func (h *toolboxAPI) cuMouseDrag(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	req, err := decodeMouse(r)
	if err != nil {
		return err
	}
	b, err := buttonNumber(req.Button)
	if err != nil {
		return err
	}
	return h.cuPointer(w, r, c, "xdotool mousemove --sync \"$1\" \"$2\" mousedown \"$5\" mousemove --sync \"$3\" \"$4\" mouseup \"$5\"\n",
		strconv.Itoa(req.StartX), strconv.Itoa(req.StartY), strconv.Itoa(req.EndX), strconv.Itoa(req.EndY), b)
}

func (h *toolboxAPI) cuMouseScroll(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	req, err := decodeMouse(r)
	if err != nil {
		return err
	}
	button := desktop.ScrollButton(req.Direction)
	if button == "" {
		return badRequest("direction must be up, down, left or right, not %q", req.Direction)
	}
	amount := req.Amount
	if amount <= 0 {
		amount = 1
	}
	if amount > 100 {
		return badRequest("amount must be at most 100")
	}
	if _, _, err := h.cuRun(r.Context(), c, "need_display\nxdotool mousemove --sync \"$1\" \"$2\" click --repeat \"$4\" \"$3\"\n",
		strconv.Itoa(req.X), strconv.Itoa(req.Y), button, strconv.Itoa(amount)); err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, map[string]bool{"success": true})
	return nil
}

// KeyboardRequest is the body of the keyboard calls: type takes text and
// a delay between keys (milliseconds), key a key and its modifiers, hotkey
// keys joined with "+".
type KeyboardRequest struct {
	Text      string   `json:"text"`
	Delay     *int     `json:"delay"`
	Key       string   `json:"key"`
	Modifiers []string `json:"modifiers"`
	Keys      string   `json:"keys"`
}

// chord joins key names into xdotool's "mod+mod+key"; a name that is no
// key is the caller's mistake.
func chord(keys []string) (string, error) {
	k, err := desktop.Chord(keys)
	if errors.Is(err, desktop.ErrBadKey) {
		return "", badRequest("%v", err)
	}
	return k, err
}

func (h *toolboxAPI) cuKeyboard(kind string) func(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	return func(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
		var req KeyboardRequest
		if err := api.DecodeJSON(r, &req, false); err != nil {
			return err
		}
		var script string
		var args []string
		switch kind {
		case "type":
			if req.Text == "" {
				return badRequest("text is required")
			}
			delay := 12
			if req.Delay != nil {
				if *req.Delay < 0 || *req.Delay > 10000 {
					return badRequest("delay must be between 0 and 10000 milliseconds")
				}
				delay = *req.Delay
			}
			script, args = "xdotool type --delay \"$1\" -- \"$2\"\n", []string{strconv.Itoa(delay), req.Text}
		case "key":
			if strings.TrimSpace(req.Key) == "" {
				return badRequest("key is required")
			}
			k, err := chord(append(append([]string{}, req.Modifiers...), req.Key))
			if err != nil {
				return err
			}
			script, args = "xdotool key -- \"$1\"\n", []string{k}
		case "hotkey":
			k, err := chord(strings.Split(req.Keys, "+"))
			if err != nil {
				return err
			}
			script, args = "xdotool key -- \"$1\"\n", []string{k}
		}
		if _, _, err := h.cuRun(r.Context(), c, "need_display\n"+script, args...); err != nil {
			return err
		}
		api.WriteJSON(w, http.StatusOK, map[string]any{})
		return nil
	}
}

// CUScreenshotResponse is a screenshot: the image in base64, the pointer
// where it was, and the image's size.
type CUScreenshotResponse struct {
	Screenshot     string           `json:"screenshot"`
	CursorPosition desktop.Position `json:"cursorPosition"`
	SizeBytes      int              `json:"sizeBytes"`
}

// cuScreenshot serves the four screenshot calls: region adds x, y, width
// and height; compressed adds format, quality and scale.
func (h *toolboxAPI) cuScreenshot(region, compressed bool) func(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	return func(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
		q := r.URL.Query()
		showCursor := "0"
		if v := q.Get("showCursor"); v == "true" || v == "1" {
			showCursor = "1"
		}
		var area string
		if region {
			var n [4]int
			for i, k := range []string{"x", "y", "width", "height"} {
				v, err := strconv.Atoi(q.Get(k))
				if err != nil || v < 0 || v > 1<<15 {
					return badRequest("%s must be a whole number between 0 and 32768", k)
				}
				n[i] = v
			}
			if n[2] == 0 || n[3] == 0 {
				return badRequest("invalid screenshot region: width and height must be greater than zero")
			}
			area = fmt.Sprintf("%d,%d,%d,%d", n[0], n[1], n[2], n[3])
		}
		var format, quality, scale string
		if compressed {
			format = strings.ToLower(q.Get("format"))
			switch format {
			case "":
				format = "png"
			case "jpg":
				format = "jpeg"
			case "png", "jpeg", "webp":
			default:
				return badRequest("format must be png, jpeg or webp, not %q", format)
			}
			quality = "85"
			if v := q.Get("quality"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > 100 {
					return badRequest("quality must be between 1 and 100")
				}
				quality = strconv.Itoa(n)
			}
			scale = "1"
			if v := q.Get("scale"); v != "" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f < 0.1 || f > 1 {
					return badRequest("scale must be between 0.1 and 1.0")
				}
				scale = strconv.FormatFloat(f, 'f', -1, 64)
			}
		}
		img, errOut, err := h.cuRun(r.Context(), c, desktop.ScreenshotScript, showCursor, area, format, quality, scale)
		if err != nil {
			return err
		}
		pos, err := parseLocation(errOut)
		if err != nil {
			return err
		}
		api.WriteJSON(w, http.StatusOK, CUScreenshotResponse{Screenshot: base64.StdEncoding.EncodeToString(img), CursorPosition: pos, SizeBytes: len(img)})
		return nil
	}
}

// CUDisplay is one display of GET /computeruse/display/info.
type CUDisplay struct {
	ID       int  `json:"id"`
	X        int  `json:"x"`
	Y        int  `json:"y"`
	Width    int  `json:"width"`
	Height   int  `json:"height"`
	IsActive bool `json:"isActive"`
}

var screenSize = regexp.MustCompile(`current (\d+) x (\d+)`)

func (h *toolboxAPI) cuDisplayInfo(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	out, _, err := h.cuRun(r.Context(), c, "need_display\nxrandr --current\n")
	if err != nil {
		return err
	}
	m := screenSize.FindStringSubmatch(string(out))
	if m == nil {
		return fmt.Errorf("%w: computer use: no screen size in %q", service.ErrRuntime, string(out))
	}
	wd, _ := strconv.Atoi(m[1])
	ht, _ := strconv.Atoi(m[2])
	api.WriteJSON(w, http.StatusOK, map[string][]CUDisplay{"displays": {{ID: 0, Width: wd, Height: ht, IsActive: true}}})
	return nil
}

// CUWindow is one window of GET /computeruse/display/windows.
type CUWindow struct {
	ID       int    `json:"id"`
	Title    string `json:"title"`
	X        int    `json:"x"`
	Y        int    `json:"y"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
	IsActive bool   `json:"isActive"`
}

// cuWindows lists the window manager's windows (wmctrl -lG: id, desktop,
// x, y, width, height, host, title) and the active one (xdotool, decimal)
// on the first line.
func (h *toolboxAPI) cuWindows(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	out, _, err := h.cuRun(r.Context(), c, "need_display\nxdotool getactivewindow 2>/dev/null || echo 0\nwmctrl -lG\n")
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	active, _ := strconv.ParseInt(strings.TrimSpace(lines[0]), 10, 64)
	windows := []CUWindow{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimPrefix(f[0], "0x"), 16, 64)
		if err != nil {
			continue
		}
		var geo [4]int
		for i := range geo {
			geo[i], _ = strconv.Atoi(f[2+i])
		}
		// The title is what follows the host name (runs of spaces in it
		// come back as one).
		title := ""
		if len(f) > 7 {
			title = strings.Join(f[7:], " ")
		}
		windows = append(windows, CUWindow{ID: int(id), Title: title, X: geo[0], Y: geo[1], Width: geo[2], Height: geo[3], IsActive: id == active})
	}
	api.WriteJSON(w, http.StatusOK, map[string][]CUWindow{"windows": windows})
	return nil
}

// cuNotServed answers the computer-use calls Sandpit does not serve yet.
func cuNotServed(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, notImplemented("computer use: "+what+" is not served by Sandpit yet; screenshots, recordings, the pointer, the keyboard and the display are"))
	}
}

// computerUseRoutes registers /toolbox/{id}/computeruse/*. Reading the
// screen (screenshots, windows, the pointer) reads what the sandbox shows,
// so it takes the read-files action; starting, stopping and input run
// programs in the sandbox: execute.
func (h *Handler) computerUseRoutes(route func(pattern string, action sandpit.Action, fn http.HandlerFunc)) {
	t := h.toolbox
	const p = "/toolbox/{id}/computeruse"
	route("POST "+p+"/start", sandpit.ActionExecute, t.cuHandler(t.cuStart))
	route("POST "+p+"/stop", sandpit.ActionExecute, t.cuHandler(t.cuStop))
	route("GET "+p+"/status", sandpit.ActionRead, t.cuHandler(t.cuGetStatus))
	route("GET "+p+"/process-status", sandpit.ActionRead, t.cuHandler(t.cuGetStatus))
	route("GET "+p+"/process/{processName}/status", sandpit.ActionRead, t.cuHandler(t.cuProcessStatus))
	route("POST "+p+"/process/{processName}/restart", sandpit.ActionExecute, t.cuHandler(t.cuRestart))
	route("GET "+p+"/process/{processName}/logs", sandpit.ActionReadFiles, t.cuHandler(t.cuProcessOutput("logs", ".log")))
	route("GET "+p+"/process/{processName}/errors", sandpit.ActionReadFiles, t.cuHandler(t.cuProcessOutput("errors", ".err")))
	route("GET "+p+"/screenshot", sandpit.ActionReadFiles, t.cuHandler(t.cuScreenshot(false, false)))
	route("GET "+p+"/screenshot/region", sandpit.ActionReadFiles, t.cuHandler(t.cuScreenshot(true, false)))
	route("GET "+p+"/screenshot/compressed", sandpit.ActionReadFiles, t.cuHandler(t.cuScreenshot(false, true)))
	route("GET "+p+"/screenshot/region/compressed", sandpit.ActionReadFiles, t.cuHandler(t.cuScreenshot(true, true)))
	route("GET "+p+"/mouse/position", sandpit.ActionReadFiles, t.cuHandler(t.cuMousePosition))
	route("POST "+p+"/mouse/move", sandpit.ActionExecute, t.cuHandler(t.cuMouseMove))
	route("POST "+p+"/mouse/click", sandpit.ActionExecute, t.cuHandler(t.cuMouseClick))
	route("POST "+p+"/mouse/drag", sandpit.ActionExecute, t.cuHandler(t.cuMouseDrag))
	route("POST "+p+"/mouse/scroll", sandpit.ActionExecute, t.cuHandler(t.cuMouseScroll))
	route("POST "+p+"/keyboard/type", sandpit.ActionExecute, t.cuHandler(t.cuKeyboard("type")))
	route("POST "+p+"/keyboard/key", sandpit.ActionExecute, t.cuHandler(t.cuKeyboard("key")))
	route("POST "+p+"/keyboard/hotkey", sandpit.ActionExecute, t.cuHandler(t.cuKeyboard("hotkey")))
	route("GET "+p+"/display/info", sandpit.ActionReadFiles, t.cuHandler(t.cuDisplayInfo))
	route("GET "+p+"/display/windows", sandpit.ActionReadFiles, t.cuHandler(t.cuWindows))
	route("POST "+p+"/recordings/start", sandpit.ActionExecute, t.cuHandler(t.cuRecStart))
	route("POST "+p+"/recordings/stop", sandpit.ActionExecute, t.cuHandler(t.cuRecStop))
	route("GET "+p+"/recordings", sandpit.ActionReadFiles, t.cuHandler(t.cuRecList))
	route("GET "+p+"/recordings/{recordingId}", sandpit.ActionReadFiles, t.cuHandler(t.cuRecGet))
	route("GET "+p+"/recordings/{recordingId}/download", sandpit.ActionReadFiles, t.cuHandler(t.cuRecDownload))
	route("DELETE "+p+"/recordings/{recordingId}", sandpit.ActionExecute, t.cuHandler(t.cuRecDelete))
	for _, pat := range []string{"GET " + p + "/a11y/tree", "POST " + p + "/a11y/find", "POST " + p + "/a11y/node/focus",
		"POST " + p + "/a11y/node/invoke", "POST " + p + "/a11y/node/value"} {
		route(pat, sandpit.ActionRead, cuNotServed("the accessibility tree"))
	}
}
