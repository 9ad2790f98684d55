package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/proto/process"
)

// ExecRequest runs one command to completion.
type ExecRequest struct {
	Cmd     string
	Args    []string
	Env     map[string]string
	Cwd     string
	Timeout time.Duration // 0 = until the caller's context ends
}

// ExecResult is a finished command's output.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// Truncated: a stream went over maxExecOutput. Each stream then holds
	// exactly its first maxExecOutput bytes; the rest was read and dropped,
	// so the exit code is still the command's.
	Truncated bool
}

// appendCapped appends what fits under maxExecOutput and records whether
// anything was dropped: output is cut at one point, never holed in the
// middle by a chunk that did not fit followed by one that did.
func appendCapped(buf, chunk []byte, truncated *bool) []byte {
	room := maxExecOutput - len(buf)
	if len(chunk) > room {
		*truncated = true
		chunk = chunk[:max(room, 0)]
	}
	return append(buf, chunk...)
}

// maxExecOutput bounds what a non-streaming exec buffers per stream; longer
// output belongs on the streaming agent protocol.
const maxExecOutput = 16 << 20

// Exec runs a command in a sandbox through its agent and collects the output.
func (s *Service) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	if req.Cmd == "" {
		return ExecResult{}, invalidf("cmd is required")
	}
	if req.Timeout < 0 {
		return ExecResult{}, invalidf("timeout must not be negative")
	}
	if err := validateEnv(req.Env); err != nil {
		return ExecResult{}, err
	}
	agent, err := s.Agent(ctx, id)
	if err != nil {
		return ExecResult{}, err
	}
	return execOn(ctx, agent, req)
}

// execOn runs req on an agent the caller has reached already (a create
// runs its template's start command before the sandbox is running).
func execOn(ctx context.Context, agent agentapi.Agent, req ExecRequest) (ExecResult, error) {
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	cfg := &process.ProcessConfig{Cmd: req.Cmd, Args: req.Args, Envs: req.Env}
	if req.Cwd != "" {
		cfg.Cwd = &req.Cwd
	}
	creq := agentapi.NewRequest(&process.StartRequest{Process: cfg}, agent.Token)
	stream, err := agent.Process.Start(ctx, creq)
	if err != nil {
		return ExecResult{}, agentError(err)
	}
	defer stream.Close()
	var res ExecResult
	ended := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			res.Stdout = appendCapped(res.Stdout, d.GetStdout(), &res.Truncated)
			res.Stderr = appendCapped(res.Stderr, d.GetStderr(), &res.Truncated)
		}
		if e := ev.GetEnd(); e != nil {
			res.ExitCode = int(e.GetExitCode())
			ended = true
		}
	}
	if err := stream.Err(); err != nil {
		return res, agentError(err)
	}
	if !ended {
		return res, fmt.Errorf("%w: the command's stream closed without an end event", ErrRuntime)
	}
	return res, nil
}

// agentError maps an agent RPC failure onto the service's error kinds.
func agentError(err error) error {
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		switch cerr.Code() {
		case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeFailedPrecondition:
			return fmt.Errorf("%w: %s", sandpit.ErrInvalid, cerr.Message())
		case connect.CodeDeadlineExceeded:
			return fmt.Errorf("command timed out: %w", context.DeadlineExceeded)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("command timed out: %w", context.DeadlineExceeded)
	}
	return fmt.Errorf("%w: agent: %v", ErrRuntime, err)
}
