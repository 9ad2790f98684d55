package daytona

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/desktop"
)

// Computer use's screen recordings (/computeruse/recordings*): ffmpeg
// grabs the display (x11grab) into an MP4 file in the sandbox, under
// ~/.daytona/recordings as Daytona keeps them. The daemon keeps no state:
// a recording is its file, named "<id>_<label>_<time>.mp4" as Daytona names
// it, beside small files of its own: ".<id>.name" (the file's name),
// ".<id>.pid" (the running ffmpeg) and ".<id>.times" (its start and end,
// seconds since the epoch), so that
// a list after a daemon restart, or from another daemon of a cluster,
// finds the same recordings.

// cuRecPrelude locates the recordings.
const cuRecPrelude = `rec="$HOME/.daytona/recordings"
mkdir -p "$rec"
`

// Recording is one recording in Daytona's shape.
type Recording struct {
	ID              string   `json:"id"`
	FileName        string   `json:"fileName"`
	FilePath        string   `json:"filePath"`
	StartTime       string   `json:"startTime"`
	EndTime         string   `json:"endTime,omitempty"`
	Status          string   `json:"status"`
	SizeBytes       *int64   `json:"sizeBytes,omitempty"`
	DurationSeconds *float64 `json:"durationSeconds,omitempty"`
}

// recordingLabel is what a label may hold: it becomes part of a file name.
var recordingLabel = regexp.MustCompile(`^[A-Za-z0-9._ -]{1,100}$`)

// recordingID is the shape of the ids start makes (a random UUID).
var recordingID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func newRecordingID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// cuRecStart starts ffmpeg on the display, detached, and records its pid
// and start time. "$1" is the id, "$2" the file name.
const cuRecStart = `need_display
size=$(xdpyinfo | awk '/dimensions:/ {print $2; exit}')
printf '%s\n' "$2" >"$rec/.$1.name"
date +%s.%N >"$rec/.$1.times"
setsid ffmpeg -nostdin -loglevel error -f x11grab -framerate 30 -video_size "$size" -i ` + desktop.Display + ` \
	-c:v libx264 -preset ultrafast -pix_fmt yuv420p -movflags +faststart -y "$rec/$2" \
	</dev/null >"$rec/.$1.log" 2>&1 9>&- &
echo $! >"$rec/.$1.pid"
# ffmpeg fails at once when it cannot grab the display or encode.
sleep 0.5
kill -0 "$(cat "$rec/.$1.pid")" 2>/dev/null || { cat "$rec/.$1.log" >&2; rm -f "$rec/.$1.pid" "$rec/.$1.times" "$rec/.$1.name" "$rec/$2"; exit 1; }
`

// cuRecStop ends a recording's ffmpeg with SIGINT, on which it finishes
// the file, and records the end time. "$1" is the id.
const cuRecStop = `p=$(cat "$rec/.$1.pid" 2>/dev/null) || { echo "recording $1 is not active" >&2; exit 4; }
kill -INT "$p" 2>/dev/null || true
i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do i=$((i+1)); sleep 0.1; done
kill -KILL "$p" 2>/dev/null || true
rm -f "$rec/.$1.pid"
echo "$(head -n1 "$rec/.$1.times") $(date +%s.%N)" >"$rec/.$1.times"
`

// cuRecList prints the home directory, then one tab-separated line per
// recording: its id, its file's size ("-" before ffmpeg made it), the
// start and end times ("-" when unknown), whether its ffmpeg runs, and its
// file's name (last: a label may hold spaces).
const cuRecList = `echo "$HOME"
for t in "$rec"/.*.times; do
	[ -e "$t" ] || continue
	id=${t##*/.}; id=${id%.times}
	n=$(cat "$rec/.$id.name" 2>/dev/null) || continue
	size=$(stat -c %s "$rec/$n" 2>/dev/null || echo -)
	set -- $(cat "$t") - -
	active=0; p=$(cat "$rec/.$id.pid" 2>/dev/null) && kill -0 "$p" 2>/dev/null && active=1
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$size" "$1" "$2" "$active" "$n"
done
`

// cuRecDelete stops a recording if it runs and removes its files. "$1" is
// the id.
const cuRecDelete = `n=$(cat "$rec/.$1.name" 2>/dev/null) || { echo "recording $1 not found" >&2; exit 4; }
p=$(cat "$rec/.$1.pid" 2>/dev/null) && kill -KILL "$p" 2>/dev/null
rm -f "$rec/$n" "$rec/.$1.name" "$rec/.$1.pid" "$rec/.$1.times" "$rec/.$1.log"
`

// epoch renders seconds since the epoch ("1700000000.123") as Daytona's
// timestamps.
func epoch(s string) (time.Time, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, int64(f*1e9)).UTC(), true
}

// cuRecordings lists the sandbox's recordings.
func (h *toolboxAPI) cuRecordings(ctx context.Context, c *sandboxConn) ([]Recording, error) {
	out, _, err := h.cuRun(ctx, c, cuRecPrelude+cuRecList)
	if err != nil {
		return nil, err
	}
	home, rest, _ := strings.Cut(string(out), "\n")
	recs := []Recording{}
	for _, line := range strings.Split(strings.TrimSpace(rest), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 6 {
			continue
		}
		r := Recording{ID: f[0], FileName: f[5], FilePath: home + "/.daytona/recordings/" + f[5], Status: "completed"}
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			r.SizeBytes = &n
		}
		start, okStart := epoch(f[2])
		end, okEnd := epoch(f[3])
		if okStart {
			r.StartTime = start.Format(time.RFC3339Nano)
		}
		switch {
		case f[4] == "1":
			r.Status, r.SizeBytes = "recording", nil
		case okEnd:
			r.EndTime = end.Format(time.RFC3339Nano)
			if okStart {
				d := end.Sub(start).Seconds()
				r.DurationSeconds = &d
			}
		case okStart:
			// Its ffmpeg ended without a stop (it failed, or the sandbox
			// restarted).
			r.Status = "failed"
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// cuRecording finds one recording by id: 404 when there is none.
func (h *toolboxAPI) cuRecording(ctx context.Context, c *sandboxConn, id string) (Recording, error) {
	if recordingID.MatchString(id) {
		recs, err := h.cuRecordings(ctx, c)
		if err != nil {
			return Recording{}, err
		}
		for _, r := range recs {
			if r.ID == id {
				return r, nil
			}
		}
	}
	return Recording{}, newProblem(http.StatusNotFound, "recording %s not found", id)
}

func (h *toolboxAPI) cuRecStart(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	var req struct {
		Label *string `json:"label"`
	}
	if err := api.DecodeJSON(r, &req, false); err != nil {
		return err
	}
	label := "session"
	if req.Label != nil && *req.Label != "" {
		if !recordingLabel.MatchString(*req.Label) || strings.HasPrefix(strings.TrimSpace(*req.Label), ".") || strings.TrimSpace(*req.Label) == "" {
			return badRequest("invalid label: up to 100 letters, digits, spaces, dots, underscores and hyphens, not starting with a dot")
		}
		label = *req.Label
	}
	id := newRecordingID()
	name := fmt.Sprintf("%s_%s_%s.mp4", id, label, time.Now().UTC().Format("20060102_150405"))
	if _, _, err := h.cuRun(r.Context(), c, cuRecPrelude+cuRecStart, id, name); err != nil {
		return err
	}
	rec, err := h.cuRecording(r.Context(), c, id)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, rec)
	return nil
}

func (h *toolboxAPI) cuRecStop(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	var req struct {
		ID string `json:"id"`
	}
	if err := api.DecodeJSON(r, &req, false); err != nil {
		return err
	}
	if _, err := h.cuRecording(r.Context(), c, req.ID); err != nil {
		return err
	}
	if _, _, err := h.cuRun(r.Context(), c, cuRecPrelude+cuRecStop, req.ID); err != nil {
		var p *problem
		if errors.As(err, &p) && strings.Contains(p.message, "(exit 4)") {
			return newProblem(http.StatusBadRequest, "recording %s is not active", req.ID)
		}
		return err
	}
	rec, err := h.cuRecording(r.Context(), c, req.ID)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, rec)
	return nil
}

func (h *toolboxAPI) cuRecList(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	recs, err := h.cuRecordings(r.Context(), c)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, map[string][]Recording{"recordings": recs})
	return nil
}

func (h *toolboxAPI) cuRecGet(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	rec, err := h.cuRecording(r.Context(), c, r.PathValue("recordingId"))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, rec)
	return nil
}

// cuRecDownload serves the recording's file as files/download serves a
// file.
func (h *toolboxAPI) cuRecDownload(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	rec, err := h.cuRecording(r.Context(), c, r.PathValue("recordingId"))
	if err != nil {
		return err
	}
	if rec.Status == "recording" {
		return badRequest("recording %s is still being recorded: stop it first", rec.ID)
	}
	r2 := r.Clone(r.Context())
	r2.URL.RawQuery = "path=" + url.QueryEscape(rec.FilePath)
	h.download(w, r2)
	return nil
}

func (h *toolboxAPI) cuRecDelete(w http.ResponseWriter, r *http.Request, c *sandboxConn) error {
	id := r.PathValue("recordingId")
	if _, err := h.cuRecording(r.Context(), c, id); err != nil {
		return err
	}
	if _, _, err := h.cuRun(r.Context(), c, cuRecPrelude+cuRecDelete, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
