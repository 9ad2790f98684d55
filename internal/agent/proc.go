package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	processpb "github.com/sandpit-dev/sandpit/proto/process"
)

const (
	// outputGrace is how long output is still read after a process exits. A
	// background child that inherited stdout would otherwise keep the stream
	// open until it exits too, which for `cmd &` may be never.
	outputGrace = time.Second

	// readChunk is the largest data event the agent sends.
	readChunk = 32 << 10

	// subscriberBuffer lets output readers run slightly ahead of a stream.
	subscriberBuffer = 64

	// defaultPath is used to find a command when the environment has no PATH.
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// procTable indexes the running processes by pid.
type procTable struct {
	mu    sync.Mutex
	procs map[uint32]*proc
}

func newProcTable() *procTable {
	return &procTable{procs: map[uint32]*proc{}}
}

func (t *procTable) add(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.procs[p.pid] = p
}

// remove drops p from the table. Once p was reaped its pid may already have
// been reused by a newer process, which must stay listed.
func (t *procTable) remove(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.procs[p.pid] == p {
		delete(t.procs, p.pid)
	}
}

func (t *procTable) byPID(pid uint32) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[pid]
}

// byTag returns the oldest running process with the tag, so the answer is
// stable when several share one.
func (t *procTable) byTag(tag string) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	var found *proc
	for _, p := range t.procs {
		if p.tag != nil && *p.tag == tag && (found == nil || p.started.Before(found.started)) {
			found = p
		}
	}
	return found
}

// list returns the running processes ordered by pid.
func (t *procTable) list() []*proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := slices.Collect(maps.Values(t.procs))
	slices.SortFunc(ps, func(a, b *proc) int { return cmp.Compare(a.pid, b.pid) })
	return ps
}

// proc is one process started by the agent. Its output is fanned out to every
// subscribed stream; a process without subscribers keeps running and its
// output is dropped, which is what lets background commands outlive the
// request that started them.
type proc struct {
	pid     uint32
	tag     *string
	config  *processpb.ProcessConfig
	started time.Time
	cmd     *exec.Cmd
	log     *slog.Logger

	// inMu serialises writes to stdin and the terminal so that input from
	// concurrent SendInput calls is never interleaved mid-chunk.
	inMu     sync.Mutex
	stdin    *os.File // write end of the stdin pipe; nil when not requested or closed
	terminal *os.File // pty master; nil for a non-PTY process

	mu        sync.Mutex
	subs      map[*subscription]struct{}
	deadlines []*time.Timer                    // pending kills from stream deadlines
	exited    bool                             // the process has been reaped; its pid may be reused
	end       *processpb.ProcessEvent_EndEvent // set once all output has been sent
}

// subscription is one stream's view of a process's events.
type subscription struct {
	events chan *processpb.ProcessEvent
	gone   chan struct{} // closed when the stream stops listening
	once   sync.Once
}

// startSpec is everything needed to start a process, already validated and
// resolved by the service.
type startSpec struct {
	config *processpb.ProcessConfig // as reported by List
	path   string                   // resolved executable
	env    []string
	dir    string
	cred   *syscall.Credential // nil: run as the agent itself
	tag    *string
	stdin  bool
	pty    *processpb.PTY // nil for pipes
}

// startProc starts a process and subscribes the caller to it before any
// output is read, so that the starting stream never misses a byte.
func startProc(t *procTable, spec startSpec, log *slog.Logger) (*proc, *subscription, error) {
	cmd := &exec.Cmd{
		Path: spec.path,
		Args: append([]string{spec.config.GetCmd()}, spec.config.GetArgs()...),
		Env:  spec.env,
		Dir:  spec.dir,
	}
	p := &proc{
		tag:    spec.tag,
		config: spec.config,
		cmd:    cmd,
		subs:   map[*subscription]struct{}{},
	}

	var outputs []*os.File
	var wraps []func([]byte) *processpb.ProcessEvent
	if spec.pty != nil {
		terminal, tty, err := openPTY(ptySize(spec.pty))
		if err != nil {
			return nil, nil, err
		}
		if spec.cred != nil {
			// The terminal belongs to its user, as login gives it, so that
			// programs that reopen it (sudo, ssh, less) can.
			_ = tty.Chown(int(spec.cred.Uid), int(spec.cred.Gid))
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		// A new session with the terminal as controlling tty (fd 0 in the
		// child) makes the process a group leader, so signals reach its whole
		// group as they do for pipe processes.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: spec.cred}
		err = cmd.Start()
		_ = tty.Close()
		if err != nil {
			_ = terminal.Close()
			return nil, nil, fmt.Errorf("start %s with a terminal: %w", spec.config.GetCmd(), err)
		}
		p.terminal = terminal
		outputs = append(outputs, terminal)
		wraps = append(wraps, ptyEvent)
	} else {
		// Its own process group lets SendSignal and deadlines reach the
		// children a shell starts, not just the shell.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: spec.cred}
		var closeAfterStart []*os.File
		cleanup := func(fs []*os.File) {
			for _, f := range fs {
				_ = f.Close()
			}
		}
		stdoutR, stdoutW, err := os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("stdout pipe: %w", err)
		}
		stderrR, stderrW, err := os.Pipe()
		if err != nil {
			cleanup([]*os.File{stdoutR, stdoutW})
			return nil, nil, fmt.Errorf("stderr pipe: %w", err)
		}
		cmd.Stdout, cmd.Stderr = stdoutW, stderrW
		closeAfterStart = append(closeAfterStart, stdoutW, stderrW)
		outputs = append(outputs, stdoutR, stderrR)
		wraps = append(wraps, stdoutEvent, stderrEvent)
		if spec.stdin {
			stdinR, stdinW, err := os.Pipe()
			if err != nil {
				cleanup(append(closeAfterStart, outputs...))
				return nil, nil, fmt.Errorf("stdin pipe: %w", err)
			}
			// A nil cmd.Stdin would give the process /dev/null; only a process
			// that asked for stdin gets a pipe, so nothing else can hang
			// waiting for input that never comes.
			cmd.Stdin = stdinR
			closeAfterStart = append(closeAfterStart, stdinR)
			p.stdin = stdinW
		}
		err = cmd.Start()
		// The child has its own copies now; keeping ours open would stop the
		// readers from ever seeing EOF.
		cleanup(closeAfterStart)
		if err != nil {
			cleanup(outputs)
			if p.stdin != nil {
				_ = p.stdin.Close()
			}
			return nil, nil, fmt.Errorf("start %s: %w", spec.config.GetCmd(), err)
		}
	}

	p.pid = uint32(cmd.Process.Pid)
	p.started = time.Now()
	p.log = log.With("pid", p.pid, "cmd", spec.config.GetCmd())
	sub := p.subscribe()
	t.add(p)

	var readers sync.WaitGroup
	for i, f := range outputs {
		readers.Go(func() { p.pump(f, wraps[i]) })
	}
	go p.wait(t, outputs, &readers)
	p.log.Debug("process started")
	return p, sub, nil
}

func ptySize(p *processpb.PTY) *unix.Winsize {
	ws := &unix.Winsize{Col: 80, Row: 24}
	if s := p.GetSize(); s != nil {
		if s.GetCols() > 0 {
			ws.Col = uint16(min(s.GetCols(), 0xffff))
		}
		if s.GetRows() > 0 {
			ws.Row = uint16(min(s.GetRows(), 0xffff))
		}
	}
	return ws
}

// openPTY opens a terminal pair sized ws. The master is returned as a
// non-blocking, poller-backed file: creack/pty hands it back in blocking
// mode, and a blocking read could neither time out after the process exits
// nor be interrupted, which would leave the stream hanging whenever a
// background child keeps the terminal open.
func openPTY(ws *unix.Winsize) (master, tty *os.File, err error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open terminal: %w", err)
	}
	defer func() { _ = m.Close() }()
	// Duplicated with close-on-exec set atomically, so a process started
	// concurrently can never inherit the master.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		_ = tty.Close()
		return nil, nil, fmt.Errorf("dup terminal: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		_ = tty.Close()
		return nil, nil, fmt.Errorf("terminal non-blocking mode: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setWinsize(master, ws); err != nil {
		_ = master.Close()
		_ = tty.Close()
		return nil, nil, err
	}
	return master, tty, nil
}

// setWinsize resizes the terminal through the raw descriptor; File.Fd would
// switch the master back to blocking mode.
func setWinsize(f *os.File, ws *unix.Winsize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws)
	}); err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	if ioErr != nil {
		return fmt.Errorf("resize terminal: %w", ioErr)
	}
	return nil
}

func stdoutEvent(b []byte) *processpb.ProcessEvent {
	return dataEvent(&processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: b}})
}

func stderrEvent(b []byte) *processpb.ProcessEvent {
	return dataEvent(&processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stderr{Stderr: b}})
}

func ptyEvent(b []byte) *processpb.ProcessEvent {
	return dataEvent(&processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Pty{Pty: b}})
}

func dataEvent(d *processpb.ProcessEvent_DataEvent) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: d}}
}

// pump forwards everything read from f as data events until EOF, or until the
// read deadline set by wait expires.
func (p *proc) pump(f *os.File, wrap func([]byte) *processpb.ProcessEvent) {
	buf := make([]byte, readChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.broadcast(wrap(slices.Clone(buf[:n])))
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				p.drain(f, buf, wrap)
			}
			// EOF for pipes, EIO for a terminal whose last user hung up.
			return
		}
	}
}

// drain forwards what is already buffered in f without waiting for more. The
// grace deadline may have expired while this reader was blocked handing a
// chunk to a slow stream; the bytes the process wrote before it exited must
// still be delivered.
func (p *proc) drain(f *os.File, buf []byte, wrap func([]byte) *processpb.ProcessEvent) {
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// Bounded, because a surviving background child may write forever.
	for range 64 {
		var n int
		var rerr error
		// Returning true makes the read non-blocking: the descriptor is in
		// non-blocking mode, so an empty pipe answers EAGAIN at once.
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		p.broadcast(wrap(slices.Clone(buf[:n])))
	}
}

// wait reaps the process, lets the readers finish, and then publishes the end
// event as the very last event of every stream.
func (p *proc) wait(t *procTable, outputs []*os.File, readers *sync.WaitGroup) {
	waitErr := p.cmd.Wait()
	p.mu.Lock()
	p.exited = true
	for _, t := range p.deadlines {
		t.Stop()
	}
	p.deadlines = nil
	p.mu.Unlock()

	grace := time.AfterFunc(outputGrace, func() {
		for _, f := range outputs {
			_ = f.SetReadDeadline(time.Now())
		}
	})
	readers.Wait()
	grace.Stop()
	for _, f := range outputs {
		_ = f.Close()
	}
	p.inMu.Lock()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
	p.inMu.Unlock()

	end := &processpb.ProcessEvent_EndEvent{}
	if st := p.cmd.ProcessState; st != nil {
		end.ExitCode = int32(st.ExitCode())
		end.Exited = st.Exited()
		end.Status = st.String()
	}
	// Like envd, a process that did not end well says how in the end
	// event ("exit status 3", "signal: killed"): the E2B SDK makes it the
	// message of its CommandExitError.
	if waitErr != nil {
		msg := waitErr.Error()
		end.Error = &msg
	}

	// Leave the table first: once a client sees end, List must not show the
	// process any more.
	t.remove(p)
	p.mu.Lock()
	p.end = end
	subs := slices.Collect(maps.Keys(p.subs))
	p.mu.Unlock()
	ev := &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}}
	for _, s := range subs {
		s.deliver(ev)
	}
	p.log.Debug("process ended", "status", end.Status)
}

// subscribe registers a new stream. A stream that subscribes after the end
// event was published still receives it, so nobody waits forever.
func (p *proc) subscribe() *subscription {
	s := &subscription{
		events: make(chan *processpb.ProcessEvent, subscriberBuffer),
		gone:   make(chan struct{}),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		s.events <- &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: p.end}}
		return s
	}
	p.subs[s] = struct{}{}
	return s
}

// unsubscribe stops delivery to s and releases any reader blocked on it.
func (p *proc) unsubscribe(s *subscription) {
	s.once.Do(func() { close(s.gone) })
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.subs, s)
}

// broadcast hands ev to every current subscriber. It blocks while a
// subscriber's buffer is full, so a slow client slows the process down the
// way a full pipe would, instead of losing output or growing memory.
func (p *proc) broadcast(ev *processpb.ProcessEvent) {
	p.mu.Lock()
	subs := slices.Collect(maps.Keys(p.subs))
	p.mu.Unlock()
	for _, s := range subs {
		s.deliver(ev)
	}
}

func (s *subscription) deliver(ev *processpb.ProcessEvent) {
	select {
	case s.events <- ev:
	case <-s.gone:
	}
}

// signal delivers sig to the process's whole group, falling back to the
// process alone if the group is already gone.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Once reaped, the pid may belong to an unrelated process.
	if p.exited {
		return nil
	}
	if err := syscall.Kill(-int(p.pid), sig); err == nil {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %d: %w", p.pid, err)
	}
	return nil
}

// killAt kills the process group with SIGKILL at deadline (at once if it has
// passed) unless the process has ended by then.
func (p *proc) killAt(deadline time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	p.deadlines = append(p.deadlines, time.AfterFunc(time.Until(deadline), func() {
		if err := p.signal(syscall.SIGKILL); err != nil {
			p.log.Warn("kill process at its deadline", "err", err)
			return
		}
		p.log.Debug("process killed at its deadline")
	}))
}

// writeInput writes b to the process's terminal (when it has one, whichever
// input kind was asked for, since a terminal has only one input) or to its
// stdin pipe. It gives up when ctx ends so a process that never reads cannot
// pin the request forever.
func (p *proc) writeInput(ctx context.Context, b []byte, wantPTY bool) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	f := p.terminal
	switch {
	case f != nil:
	case wantPTY:
		return errNotPTY
	case p.stdin == nil:
		return errNoStdin
	default:
		f = p.stdin
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	defer func() {
		if !stop() {
			_ = f.SetWriteDeadline(time.Time{})
		}
	}()
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("write input to %d: %w", p.pid, err)
	}
	return nil
}

var (
	errNotPTY  = errors.New("process was not started with a terminal")
	errNoStdin = errors.New("process stdin is not open; start it with stdin enabled")
)

// closeStdin closes the stdin pipe so the process reads EOF. Closing twice,
// or closing the stdin of a process that never had one, is not an error.
func (p *proc) closeStdin() error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.terminal != nil {
		return errors.New("process has a terminal; send Ctrl-D (0x04) as input instead")
	}
	if p.stdin == nil {
		return nil
	}
	err := p.stdin.Close()
	p.stdin = nil
	if err != nil {
		return fmt.Errorf("close stdin of %d: %w", p.pid, err)
	}
	return nil
}

// resize changes the terminal size of a PTY process.
func (p *proc) resize(size *processpb.PTY) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.terminal == nil {
		return errNotPTY
	}
	if err := setWinsize(p.terminal, ptySize(size)); err != nil {
		return fmt.Errorf("process %d: %w", p.pid, err)
	}
	return nil
}

// info describes the process for List.
func (p *proc) info() *processpb.ProcessInfo {
	return &processpb.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag}
}

// lookPath finds cmd the way a shell would, but in the process's own PATH
// rather than the agent's, so a request that sets PATH is honoured.
func lookPath(cmd string, env map[string]string, dir string) (string, error) {
	if strings.Contains(cmd, "/") {
		if !filepath.IsAbs(cmd) {
			cmd = filepath.Join(dir, cmd)
		}
		if err := checkExecutable(cmd); err != nil {
			return "", err
		}
		return cmd, nil
	}
	path, ok := env["PATH"]
	if !ok {
		path = defaultPath
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		candidate := filepath.Join(d, cmd)
		if checkExecutable(candidate) == nil {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in PATH: %w", cmd, fs.ErrNotExist)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: not an executable file: %w", p, fs.ErrPermission)
	}
	return nil
}

// envList flattens env into the KEY=VALUE form exec expects, sorted so the
// result is deterministic.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
