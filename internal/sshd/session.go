package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// ptyRequest is the payload of a pty-req (RFC 4254 6.2).
type ptyRequest struct {
	Term          string
	Cols, Rows    uint32
	Width, Height uint32
	Modes         string
}

// windowChange is the payload of a window-change (RFC 4254 6.7).
type windowChange struct {
	Cols, Rows    uint32
	Width, Height uint32
}

type execRequest struct{ Command string }

type envRequest struct{ Name, Value string }

type subsystemRequest struct{ Name string }

type exitStatus struct{ Status uint32 }

// exitSignal is the payload of an exit-signal (RFC 4254 6.10).
type exitSignal struct {
	Signal     string
	CoreDumped bool
	Error      string
	Lang       string
}

// ended is how a command ended: its exit code, or the signal (its SSH
// name, "KILL") that ended it.
type ended struct {
	code   int
	signal string
	core   bool
}

// signalOf reads the signal out of the agent's status of a process that
// did not exit ("signal: killed", "signal: segmentation fault (core
// dumped)"), by the names Go gives signals.
func signalOf(status string) (string, bool) {
	desc, ok := strings.CutPrefix(status, "signal: ")
	if !ok {
		return "", false
	}
	desc, core := strings.CutSuffix(desc, " (core dumped)")
	for n := 1; n < 32; n++ {
		if unix.Signal(n).String() == desc {
			return strings.TrimPrefix(unix.SignalName(unix.Signal(n)), "SIG"), core
		}
	}
	return "", false
}

// maxEnv bounds the variables one session may set.
const maxEnv = 64

// session serves one session channel: its requests configure it (env,
// pty-req), then one of shell, exec or subsystem starts what it runs.
func (s *Server) session(ctx context.Context, id string, nch ssh.NewChannel) {
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		env     = map[string]string{}
		pty     *ptyRequest
		resize  = make(chan windowChange, 4)
		started bool
		start   func()
		done    = make(chan struct{})
	)
	for {
		var r *ssh.Request
		select {
		case r = <-reqs:
		case <-done:
			// What was started has finished and said so; the channel
			// is closed, and its remaining requests do not matter.
			return
		}
		if r == nil {
			// The client closed the channel: whatever runs is ended.
			cancel()
			if started {
				<-done
			}
			return
		}
		ok := false
		switch r.Type {
		case "env":
			var e envRequest
			// As OpenSSH's AcceptEnv, a variable the service would
			// refuse on an exec is refused here (SANDPIT_*, bad names).
			if ssh.Unmarshal(r.Payload, &e) == nil && !started && len(env) < maxEnv &&
				s.be.ValidateEnv(map[string]string{e.Name: e.Value}) == nil {
				env[e.Name] = e.Value
				ok = true
			}
		case "pty-req":
			var p ptyRequest
			if ssh.Unmarshal(r.Payload, &p) == nil && !started {
				pty, ok = &p, true
				if p.Term != "" {
					env["TERM"] = p.Term
				}
			}
		case "window-change":
			var w windowChange
			if ssh.Unmarshal(r.Payload, &w) == nil {
				select {
				case resize <- w:
				default:
				}
			}
		case "shell", "exec":
			if started {
				break
			}
			var cmd []string
			if r.Type == "exec" {
				var e execRequest
				if ssh.Unmarshal(r.Payload, &e) != nil {
					break
				}
				// As sshd does: the account's shell runs the command line.
				cmd = []string{"/bin/sh", "-c", `exec "${SHELL:-/bin/sh}" -c "$1"`, "sh", e.Command}
			} else {
				// A login shell, the account's own.
				cmd = []string{"/bin/sh", "-c", `exec "${SHELL:-/bin/sh}" -l`}
			}
			started, ok = true, true
			start = func() { finish(ch, s.run(ctx, id, ch, cmd, env, pty, resize)) }
		case "subsystem":
			var sub subsystemRequest
			if started || ssh.Unmarshal(r.Payload, &sub) != nil || sub.Name != "sftp" {
				break
			}
			started, ok = true, true
			start = func() { finish(ch, ended{code: s.serveSFTP(ctx, id, ch)}) }
		case "signal":
			// Without a terminal there is nothing to deliver a signal
			// through but the agent, which sends SIGTERM and SIGKILL
			// only; under a PTY, Ctrl-C reaches the terminal as a byte.
		}
		if r.WantReply {
			_ = r.Reply(ok, nil)
		}
		// What the request starts runs only once its reply is sent: a
		// command that ends at once (no agent) would otherwise close the
		// channel before the client learnt its exec was accepted, and the
		// client would see the channel end without an exit status.
		if start != nil {
			run := start
			start = nil
			go func() {
				defer close(done)
				run()
			}()
		}
	}
}

// finish reports how a command ended and closes the channel, as sshd
// does: end of output, then the exit status (or signal), then the close.
func finish(ch ssh.Channel, e ended) {
	_ = ch.CloseWrite()
	if e.signal != "" {
		_, _ = ch.SendRequest("exit-signal", false, ssh.Marshal(exitSignal{Signal: e.signal, CoreDumped: e.core}))
	} else {
		code := e.code
		if code < 0 || code > 255 {
			code = 255
		}
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(exitStatus{Status: uint32(code)}))
	}
	_ = ch.Close()
}

// run starts cmd in the sandbox through its agent, with the channel as
// its terminal (pty set) or as its stdin, stdout and stderr, and returns
// its exit code. A failure to start is reported on the channel's stderr
// with the code 255, as ssh reports its own failures.
func (s *Server) run(ctx context.Context, id string, ch ssh.Channel, cmd []string, env map[string]string, pty *ptyRequest, resize <-chan windowChange) ended {
	p, _ := sandpit.PrincipalFrom(ctx)
	if !p.May(sandpit.ActionExecute) {
		fmt.Fprintf(ch.Stderr(), "sandpit: this login may not run commands\r\n")
		return ended{code: 255}
	}
	agent, err := s.be.Agent(ctx, id)
	if err != nil {
		fmt.Fprintf(ch.Stderr(), "sandpit: sandbox %s: %v\r\n", id, err)
		return ended{code: 255}
	}
	start := &process.StartRequest{Process: &process.ProcessConfig{Cmd: cmd[0], Args: cmd[1:], Envs: env}, Stdin: proto.Bool(true)}
	if pty != nil {
		start.Pty = &process.PTY{Size: termSize(pty.Cols, pty.Rows)}
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	stream, err := agent.Process.Start(sctx, agentapi.NewRequest(start, agent.Token))
	if err != nil {
		fmt.Fprintf(ch.Stderr(), "sandpit: start %s: %v\r\n", cmd[0], err)
		return ended{code: 255}
	}
	defer stream.Close()
	var (
		sel   *process.ProcessSelector
		done  bool
		out   = ended{code: 255}
		input sync.WaitGroup
	)
	defer func() {
		if sel != nil && !done {
			// The client went away (or the session was ended) while the
			// command ran: it must not outlive its session.
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, _ = agent.Process.SendSignal(kctx, agentapi.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGKILL}, agent.Token))
			cancel()
		}
		stop()
		input.Wait()
	}()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if st := ev.GetStart(); st != nil && sel == nil {
			sel = &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: st.GetPid()}}
			// The feeder is not waited for: it blocks reading the
			// channel, which only the close after the exit status ends.
			go feed(sctx, agent, sel, ch, pty != nil)
			input.Add(1)
			go func() { defer input.Done(); follow(sctx, agent, sel, resize) }()
		}
		if d := ev.GetData(); d != nil {
			if b := d.GetStdout(); len(b) > 0 {
				_, _ = ch.Write(b)
			}
			if b := d.GetPty(); len(b) > 0 {
				_, _ = ch.Write(b)
			}
			if b := d.GetStderr(); len(b) > 0 {
				_, _ = ch.Stderr().Write(b)
			}
		}
		if e := ev.GetEnd(); e != nil {
			done = true
			out = ended{code: int(e.GetExitCode())}
			if !e.GetExited() {
				// Ended by a signal, which the client reports as sshd's
				// clients do ("Killed by signal 9").
				out.code = 255
				out.signal, out.core = signalOf(e.GetStatus())
			}
		}
	}
	if err := stream.Err(); err != nil && !done && ctx.Err() == nil {
		fmt.Fprintf(ch.Stderr(), "sandpit: %v\r\n", err)
	}
	return out
}

// feed passes what the client types or pipes on to the process: its
// terminal's input under a PTY, else its stdin, which is closed at the
// client's end of input (ssh < file, or EOF).
func feed(ctx context.Context, agent agentapi.Agent, sel *process.ProcessSelector, in io.Reader, tty bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			input := &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: chunk}}
			if tty {
				input.Input = &process.ProcessInput_Pty{Pty: chunk}
			}
			if _, serr := agent.Process.SendInput(ctx, agentapi.NewRequest(&process.SendInputRequest{Process: sel, Input: input}, agent.Token)); serr != nil {
				return
			}
		}
		if err != nil {
			if !tty && ctx.Err() == nil {
				_, _ = agent.Process.CloseStdin(ctx, agentapi.NewRequest(&process.CloseStdinRequest{Process: sel}, agent.Token))
			}
			return
		}
	}
}

// follow passes the client's new window sizes on to the process's PTY.
func follow(ctx context.Context, agent agentapi.Agent, sel *process.ProcessSelector, sizes <-chan windowChange) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-sizes:
			_, err := agent.Process.Update(ctx, agentapi.NewRequest(&process.UpdateRequest{Process: sel,
				Pty: &process.PTY{Size: termSize(w.Cols, w.Rows)}}, agent.Token))
			var cerr *connect.Error
			if errors.As(err, &cerr) && cerr.Code() == connect.CodeNotFound {
				return
			}
		}
	}
}

// termSize is a client's terminal size, 80x24 where it says 0 (a client
// whose own terminal has no size, such as one under script(1) reading a
// pipe).
func termSize(cols, rows uint32) *process.PTY_Size {
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	return &process.PTY_Size{Cols: min(cols, 1000), Rows: min(rows, 1000)}
}
