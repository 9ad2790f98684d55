package templates

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// buildRun is one build the engine runs in this process, and every build
// row that joined it (a duplicate request of the same content): they share
// its log and its end.
type buildRun struct {
	owner, hash string
	done        chan struct{}

	mu      sync.Mutex
	members []string
	// tags is, for each member, its template and the tags its own request
	// asked for: one content may be built for two templates, or under two
	// tags at once, and each member keeps its own.
	tags map[string]memberTags
	// lines is the log as readers see it: appended to, never rewritten,
	// so an offset into it stays valid (E2B's SDK polls by offset).
	lines   []LogEntry
	log     boundedLog
	files   []*os.File
	changed chan struct{} // closed and replaced whenever a line is added
	state   sandpit.BuildState
	image   string
	reason  string
}

// boundedLog keeps a build's log within a budget (Config.BuildLogMax): the
// first half of the budget as it comes (the head, visible at once), then a
// ring of the newest lines within the other half (the tail, which holds the
// error that ends a failing build), appended to the visible log with a line
// saying what was dropped between them when the build ends. Memory and the
// file on disk hold at most the budget, whatever a build prints.
type boundedLog struct {
	max       int64 // negative: no bound
	headBytes int64
	over      bool // the head is full: lines go to the tail
	tail      []LogEntry
	tailBytes int64
	dropped   int64 // lines
	droppedB  int64 // bytes
}

// maxLogLine bounds one entry's message: a single line of output may be
// any length.
const maxLogLine = 64 << 10

func (r *buildRun) add(level, msg string) {
	if len(msg) > maxLogLine {
		msg = msg[:maxLogLine] + fmt.Sprintf(" [... %d more bytes of this line dropped]", len(msg)-maxLogLine)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := LogEntry{Time: time.Now().UTC(), Level: level, Message: msg}
	line, _ := json.Marshal(e)
	size := int64(len(line) + 1)
	l := &r.log
	if l.max >= 0 && (l.over || l.headBytes+size > l.max/2) {
		// Past the head: the line joins the tail, which drops its oldest
		// lines to stay within its half. Readers see the tail at the end.
		l.over = true
		l.tail = append(l.tail, e)
		l.tailBytes += size
		for l.tailBytes > l.max/2 && len(l.tail) > 0 {
			old, _ := json.Marshal(l.tail[0])
			l.tail[0] = LogEntry{}
			l.tail = l.tail[1:]
			l.tailBytes -= int64(len(old) + 1)
			l.dropped++
			l.droppedB += int64(len(old) + 1)
		}
		return
	}
	l.headBytes += size
	r.appendLocked(e, line)
}

// appendLocked makes e visible: in memory, in every member's file, and to
// followers.
func (r *buildRun) appendLocked(e LogEntry, line []byte) {
	r.lines = append(r.lines, e)
	for _, f := range r.files {
		_, _ = f.Write(append(line, '\n'))
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// sealLog appends the tail, after a line saying how much was dropped
// before it, once no line can follow.
func (r *buildRun) sealLog() {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := &r.log
	if !l.over {
		return
	}
	if l.dropped > 0 {
		e := LogEntry{Time: time.Now().UTC(), Level: "warn", Message: fmt.Sprintf(
			"[%d lines (%d bytes) of build output dropped here: a build keeps the first and last %d KiB of its log (--build-log-max-mb)]",
			l.dropped, l.droppedB, l.max/2>>10)}
		line, _ := json.Marshal(e)
		r.appendLocked(e, line)
	}
	for _, e := range l.tail {
		line, _ := json.Marshal(e)
		r.appendLocked(e, line)
	}
	l.tail, l.tailBytes, l.over = nil, 0, false
}

// Write makes the run an io.Writer of the engine's log stream: one entry
// per line.
func (r *buildRun) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) != "" {
			r.add("info", line)
		}
	}
	return len(p), nil
}

type memberTags struct {
	templateID string
	tags       []string
}

// builds holds the runs of this process.
type builds struct {
	mu        sync.Mutex
	byBuild   map[string]*buildRun
	byContent map[string]*buildRun
	queue     *buildQueue
	// pinned counts the running builds that use each context file.
	pinned map[string]int
	// uploads orders the quota check and the rename of context uploads.
	uploads sync.Mutex
	ctx     context.Context
}

func newBuilds(n int) *builds {
	return &builds{byBuild: map[string]*buildRun{}, byContent: map[string]*buildRun{}, queue: newBuildQueue(n), ctx: context.Background()}
}

func (s *Service) openBuildLog(buildID string) *os.File {
	dir := filepath.Join(s.cfg.TemplateDir, "logs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.log.Warn("build log directory", "err", err)
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, buildID+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.log.Warn("open build log", "build", buildID, "err", err)
		return nil
	}
	return f
}

// BuildLog returns the build's log entries from offset on, and whether the
// build has ended (so no entry will follow).
func (s *Service) BuildLog(ctx context.Context, buildID string, offset int) ([]LogEntry, bool, error) {
	b, err := s.Build(ctx, buildID)
	if err != nil {
		return nil, false, err
	}
	s.builds.mu.Lock()
	run := s.builds.byBuild[b.ID]
	s.builds.mu.Unlock()
	if run != nil {
		run.mu.Lock()
		defer run.mu.Unlock()
		return tail(run.lines, offset), run.state.Done(), nil
	}
	lines, err := s.readBuildLog(b.ID)
	return tail(lines, offset), b.State.Done(), err
}

func tail(lines []LogEntry, offset int) []LogEntry {
	if offset < 0 {
		offset = 0
	}
	if offset >= len(lines) {
		return []LogEntry{}
	}
	return append([]LogEntry(nil), lines[offset:]...)
}

func (s *Service) readBuildLog(buildID string) ([]LogEntry, error) {
	data, err := os.ReadFile(filepath.Join(s.cfg.TemplateDir, "logs", buildID+".jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []LogEntry
	for _, line := range bytes.Split(data, []byte("\n")) {
		var e LogEntry
		if len(line) > 0 && json.Unmarshal(line, &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// FollowBuildLog calls fn with each log entry of the build from offset on,
// as they come, until the build ends or ctx does.
func (s *Service) FollowBuildLog(ctx context.Context, buildID string, offset int, fn func(LogEntry) error) error {
	for {
		s.builds.mu.Lock()
		run := s.builds.byBuild[buildID]
		s.builds.mu.Unlock()
		var changed chan struct{}
		if run != nil {
			run.mu.Lock()
			changed = run.changed
			run.mu.Unlock()
		}
		lines, done, err := s.BuildLog(ctx, buildID, offset)
		if err != nil {
			return err
		}
		for _, e := range lines {
			if err := fn(e); err != nil {
				return err
			}
		}
		offset += len(lines)
		if done {
			return nil
		}
		if changed == nil {
			// Waiting for a definition, or in another process: poll.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
