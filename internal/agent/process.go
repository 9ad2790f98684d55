package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	processpb "github.com/sandpit-dev/sandpit/proto/process"
	"github.com/sandpit-dev/sandpit/proto/process/processconnect"
)

// processService implements process.Process.
type processService struct {
	a *agent
}

var _ processconnect.ProcessHandler = (*processService)(nil)

// Start runs a process and streams its events. The stream's deadline (the
// Connect timeout) bounds the process: when it fires the process is killed.
// A client that merely disconnects leaves the process running, so that
// background commands survive and can be reattached with Connect.
func (s *processService) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	spec, err := s.startSpec(ctx, req.Msg)
	if err != nil {
		return err
	}
	p, sub, err := startProc(s.a.procs, spec, s.a.log)
	if err != nil {
		return startError(err)
	}
	defer p.unsubscribe(sub)
	send := func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	}
	return s.follow(ctx, p, sub, s.a.keepaliveFor(req.Header()), send)
}

// Connect attaches to a running process: a start event with its pid first,
// then its events from now on. The stream's deadline kills the process, as
// for Start, because E2B clients use it as the command's timeout.
func (s *processService) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := p.subscribe()
	defer p.unsubscribe(sub)
	send := func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	}
	return s.follow(ctx, p, sub, s.a.keepaliveFor(req.Header()), send)
}

// follow sends the start event and then relays the subscription until the
// end event, sending keepalives whenever the stream has been quiet.
func (s *processService) follow(ctx context.Context, p *proc, sub *subscription, keepalive time.Duration, send func(*processpb.ProcessEvent) error) error {
	start := &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: p.pid}}}
	if err := send(start); err != nil {
		return fmt.Errorf("send start event: %w", err)
	}
	timer := time.NewTimer(keepalive)
	defer timer.Stop()
	for {
		select {
		case ev := <-sub.events:
			if err := send(ev); err != nil {
				return fmt.Errorf("send process event: %w", err)
			}
			if ev.GetEnd() != nil {
				return nil
			}
		case <-timer.C:
			ka := &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}
			if err := send(ka); err != nil {
				return fmt.Errorf("send keepalive: %w", err)
			}
		case <-ctx.Done():
			// The deadline bounds the process, not just this stream: a client
			// that times out usually drops the connection a moment before the
			// server's own timer fires, and a client that went away earlier
			// still asked for the process to end by then.
			if deadline, ok := ctx.Deadline(); ok {
				p.killAt(deadline)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("process %d killed: deadline exceeded", p.pid))
			}
			return connect.NewError(connect.CodeCanceled, fmt.Errorf("stream of process %d: %w", p.pid, ctx.Err()))
		}
		timer.Reset(keepalive)
	}
}

// startSpec validates a StartRequest and resolves everything the process
// needs, so that a bad request fails before anything is started.
func (s *processService) startSpec(ctx context.Context, req *processpb.StartRequest) (startSpec, error) {
	cfg := req.GetProcess()
	if cfg.GetCmd() == "" {
		return startSpec{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}

	dir := s.a.homeDir(ctx)
	if wd := s.a.workdir(); wd != "" {
		dir = wd
	}
	if cfg.Cwd != nil && cfg.GetCwd() != "" {
		dir = s.a.resolvePath(ctx, cfg.GetCwd())
		fi, err := os.Stat(dir)
		if err != nil {
			return startSpec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %s: %w", dir, err))
		}
		if !fi.IsDir() {
			return startSpec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %s is not a directory", dir))
		}
	}

	// The account's identity variables replace the agent's own (root's),
	// and the request's variables win over both.
	acc := s.a.account(ctx)
	env := s.a.env()
	if acc.Home != "" {
		env["HOME"] = acc.Home
	}
	env["USER"] = acc.Name
	env["LOGNAME"] = acc.Name
	if acc.Shell != "" {
		env["SHELL"] = acc.Shell
	}
	maps.Copy(env, cfg.GetEnvs())
	if req.GetPty() != nil {
		if _, ok := env["TERM"]; !ok {
			// Full-screen programs refuse to run on a terminal without a type.
			env["TERM"] = "xterm-256color"
		}
	}

	path, err := lookPath(cfg.GetCmd(), env, dir)
	if err != nil {
		return startSpec{}, execError(fmt.Errorf("process.cmd: %w", err))
	}

	reported := proto.CloneOf(cfg)
	reported.Cwd = &dir
	return startSpec{
		config: reported,
		path:   path,
		env:    envList(env),
		dir:    dir,
		cred:   acc.credential(),
		tag:    req.Tag,
		stdin:  req.GetStdin(),
		pty:    req.GetPty(),
	}, nil
}

// startError maps a failure to start a process to a Connect error.
func startError(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC):
		return execError(err)
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.EMFILE):
		// The pids limit or memory of the sandbox is exhausted.
		return connect.NewError(connect.CodeResourceExhausted, err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

// execError is the InvalidArgument of a program that does not exist (a
// missing interpreter of a script included) or that exists but cannot be
// run, marked in its metadata as which of the two it is.
func execError(err error) error {
	ce := connect.NewError(connect.CodeInvalidArgument, err)
	kind := agentapi.ExecNotExecutable
	if errors.Is(err, fs.ErrNotExist) {
		kind = agentapi.ExecNotFound
	}
	ce.Meta().Set(agentapi.ExecErrorHeader, kind)
	return ce
}

// find resolves a ProcessSelector to a running process.
func (s *processService) find(sel *processpb.ProcessSelector) (*proc, error) {
	var p *proc
	switch v := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		p = s.a.procs.byPID(v.Pid)
	case *processpb.ProcessSelector_Tag:
		p = s.a.procs.byTag(v.Tag)
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector needs a pid or a tag"))
	}
	if p == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %s not found", selectorString(sel)))
	}
	return p, nil
}

func selectorString(sel *processpb.ProcessSelector) string {
	if tag, ok := sel.GetSelector().(*processpb.ProcessSelector_Tag); ok {
		return fmt.Sprintf("with tag %q", tag.Tag)
	}
	return fmt.Sprintf("%d", sel.GetPid())
}

// List returns the running processes.
func (s *processService) List(_ context.Context, _ *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	res := &processpb.ListResponse{}
	for _, p := range s.a.procs.list() {
		res.Processes = append(res.Processes, p.info())
	}
	return connect.NewResponse(res), nil
}

// SendInput writes to a process's stdin or terminal.
func (s *processService) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := s.input(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

// input writes one ProcessInput to p, mapping failures to Connect errors.
func (s *processService) input(ctx context.Context, p *proc, in *processpb.ProcessInput) error {
	var err error
	switch v := in.GetInput().(type) {
	case *processpb.ProcessInput_Stdin:
		err = p.writeInput(ctx, v.Stdin, false)
	case *processpb.ProcessInput_Pty:
		err = p.writeInput(ctx, v.Pty, true)
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input needs stdin or pty bytes"))
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotPTY), errors.Is(err, errNoStdin), errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrClosed):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

// StreamInput writes an ordered stream of input to one process: a start
// message selects the process, data messages carry the input.
func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *processpb.StreamInputRequest_Start:
			found, err := s.find(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = found
		case *processpb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("input before a start message selected a process"))
			}
			if err := s.input(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, fmt.Errorf("receive input: %w", err)
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

// SendSignal delivers SIGTERM or SIGKILL to a process and its group. Any open
// stream of the process then receives its end event.
func (s *processService) SendSignal(_ context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v", req.Msg.GetSignal()))
	}
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.signal(sig); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// CloseStdin closes a process's stdin so that it reads EOF.
func (s *processService) CloseStdin(_ context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

// Update resizes a process's terminal. A request without a size is a no-op.
func (s *processService) Update(_ context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	p, err := s.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetPty().GetSize() != nil {
		if err := p.resize(req.Msg.GetPty()); err != nil {
			if errors.Is(err, errNotPTY) {
				return nil, connect.NewError(connect.CodeFailedPrecondition, err)
			}
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}
