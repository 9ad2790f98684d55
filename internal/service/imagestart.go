package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/driver"
)

// imageStart is the start and ready commands image declares in its labels
// (driver.LabelStartCmd, driver.LabelReadyCmd), as a template carrying only
// those; ok is false when it declares none. Labels are read from the engine
// each time, not cached: a tag such as :latest may move between creates.
func (s *Service) imageStart(ctx context.Context, image string) (t sandpit.Template, ok bool, err error) {
	if s.cfg.Images == nil || image == "" {
		return sandpit.Template{}, false, nil
	}
	labels, err := s.cfg.Images.ImageLabels(ctx, image)
	if errors.Is(err, driver.ErrImageNotFound) {
		return sandpit.Template{}, false, nil
	}
	if err != nil {
		return sandpit.Template{}, false, runtimeErr("inspect image", err)
	}
	t = sandpit.Template{StartCmd: labels[driver.LabelStartCmd], ReadyCmd: labels[driver.LabelReadyCmd]}
	return t, t.StartCmd != "" || t.ReadyCmd != "", nil
}

// startImage runs what sb's image declares to run at start (see
// imageStart); when started is false the start command is already running
// (a pooled container started it) and only readiness is awaited.
func (s *Service) startImage(ctx context.Context, sb sandpit.Sandbox, started bool) error {
	t, ok, err := s.imageStart(ctx, sb.Image)
	if err != nil || !ok {
		return err
	}
	if started {
		t.StartCmd = ""
	}
	return s.startTemplate(ctx, sb, t)
}

// readyPoll is how often a create polls a template's ready command.
const readyPoll = 200 * time.Millisecond

// runStartCommand starts a template's start command detached and waits for
// its ready command to succeed, as E2B's setStartCmd does: the create
// answers once the sandbox is ready for its user.
func (s *Service) startTemplate(ctx context.Context, sb sandpit.Sandbox, t sandpit.Template) error {
	c, err := s.rt.Inspect(ctx, sb.ContainerID)
	if err != nil {
		return runtimeErr("inspect container", err)
	}
	c2 := agentapi.NewClients(s.agents.Client(), net.JoinHostPort(c.IP, strconv.Itoa(agentapi.Port)))
	agent := agentapi.Agent{Addr: net.JoinHostPort(c.IP, strconv.Itoa(agentapi.Port)), Token: sb.AccessToken, Process: c2.Process, Filesystem: c2.Filesystem}
	if t.StartCmd != "" {
		// A background job with every stream redirected: the agent's exec
		// returns when the launching shell does, and the started process
		// lives on in the sandbox. (Not nohup: minimal images lack it, and
		// nothing sends the job a hangup.)
		launch := "sh -c \"$0\" >" + agentapi.StartLogPath + " 2>&1 </dev/null &"
		res, err := execOn(ctx, agent, ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", launch, t.StartCmd}, Cwd: t.Workdir, Timeout: 30 * time.Second})
		if err != nil {
			return fmt.Errorf("start command: %w", err)
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("%w: the template's start command could not be launched (exit %d): %s", ErrAgentUnhealthy, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
	}
	if t.ReadyCmd == "" {
		return nil
	}
	deadline := time.Now().Add(s.cfg.ReadyTimeout)
	for {
		res, err := execOn(ctx, agent, ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", t.ReadyCmd}, Cwd: t.Workdir, Timeout: s.cfg.ReadyTimeout})
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the template's ready command did not succeed within %s", ErrAgentUnhealthy, s.cfg.ReadyTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(readyPoll):
		}
	}
}
