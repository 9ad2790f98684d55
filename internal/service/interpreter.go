package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/interpreter"
)

// ErrNoInterpreter: the sandbox has no code interpreter to run code on. It
// was not made from an interpreter template (code-interpreter-v1), or its
// server is not running.
var ErrNoInterpreter = errors.New("the sandbox has no code interpreter")

// interpreterTemplate is the template sandboxes with an interpreter are
// made from (E2B's name for it).
const interpreterTemplate = "code-interpreter-v1"

// CodeRequest runs code on a sandbox's code interpreter.
type CodeRequest struct {
	Code     string
	Language string // the server's default (python) when empty
	// Context names a context of the caller's choosing. Code run in one
	// context shares its variables; the context is made on first use, so
	// a retried call finds the one its first attempt made. Empty is the
	// language's default context.
	Context string
	Env     map[string]string
	Timeout time.Duration // 0 = until the caller's context ends
}

// codeContextName keeps names to what reads well in a URL and a log.
var codeContextName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// codeContexts maps each sandbox's context names to the server's ids. It is
// memory only: a daemon restart forgets the names (the kernels go on
// running in the sandbox), and the next call by a name makes a new context.
type codeContexts struct {
	mu sync.Mutex
	m  map[string]map[string]string // sandbox id -> name -> server context id
	// made serialises the first use of one name, so two calls racing on a
	// new name make one context between them.
	made keyedLocks
}

func (c *codeContexts) get(id, name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id][name]
}

func (c *codeContexts) set(id, name, ctxID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]map[string]string{}
	}
	if ctxID == "" {
		delete(c.m[id], name)
		return
	}
	if c.m[id] == nil {
		c.m[id] = map[string]string{}
	}
	c.m[id][name] = ctxID
}

func (c *codeContexts) names(id string) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.m[id]))
	for k, v := range c.m[id] {
		out[k] = v
	}
	return out
}

func (c *codeContexts) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// interpreterTarget is the address of a running sandbox's interpreter
// server and the token it takes.
func (s *Service) interpreterTarget(ctx context.Context, id string) (addr, token string, err error) {
	agentAddr, token, err := s.AgentTarget(ctx, id)
	if err != nil {
		return "", "", err
	}
	host, _, err := net.SplitHostPort(agentAddr)
	if err != nil {
		return "", "", err
	}
	return net.JoinHostPort(host, strconv.Itoa(interpreter.Port)), token, nil
}

func (s *Service) interpreterClient() interpreter.Client {
	return interpreter.Client{HTTP: s.agents.Client()}
}

// noInterpreter explains ErrUnavailable in the terms of what to do.
func noInterpreter(id string) error {
	return fmt.Errorf("%w: nothing listens on port %d in sandbox %s; create the sandbox from the %s template to run code", ErrNoInterpreter, interpreter.Port, id, interpreterTemplate)
}

func interpreterErr(id string, err error) error {
	var se *interpreter.ServerError
	switch {
	case errors.Is(err, interpreter.ErrUnavailable):
		return noInterpreter(id)
	case errors.As(err, &se) && se.Status/100 == 4:
		return fmt.Errorf("%w: %s", sandpit.ErrInvalid, se.Message)
	case errors.As(err, &se):
		return fmt.Errorf("%w: %s", ErrAgentUnhealthy, se.Error())
	}
	return err
}

// RunCode runs code on the sandbox's code interpreter and calls fn with each
// line of the execution's stream as the server sends it. The error is for
// what failed before or instead of the stream: the code's own exceptions
// are lines of type "error".
func (s *Service) RunCode(ctx context.Context, id string, req CodeRequest, fn func(interpreter.Event) error) error {
	switch {
	case req.Code == "":
		return invalidf("code is required")
	case req.Timeout < 0:
		return invalidf("timeout must not be negative")
	case req.Context != "" && !codeContextName.MatchString(req.Context):
		return invalidf("context %q: a name is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", req.Context)
	}
	if err := validateEnv(req.Env); err != nil {
		return err
	}
	addr, token, err := s.interpreterTarget(ctx, id)
	if err != nil {
		return err
	}
	ic := s.interpreterClient()
	ctxID := ""
	if req.Context != "" {
		if ctxID, err = s.codeContext(ctx, id, addr, req.Context, req.Language, ""); err != nil {
			return err
		}
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	// A named context's language is its own; the server refuses both.
	lang := req.Language
	if ctxID != "" {
		lang = ""
	}
	run := func(ctxID string) error {
		return ic.Execute(ctx, addr, token, interpreter.Request{Code: req.Code, ContextID: ctxID, Language: lang, Env: req.Env}, fn)
	}
	err = run(ctxID)
	var se *interpreter.ServerError
	if ctxID != "" && errors.As(err, &se) && se.NotFound() {
		// The sandbox restarted and its kernels with it: the name gets a
		// new context, once.
		s.codeCtx.set(id, req.Context, "")
		if ctxID, err = s.codeContext(ctx, id, addr, req.Context, req.Language, ""); err != nil {
			return err
		}
		err = run(ctxID)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && req.Timeout > 0 {
			return fmt.Errorf("%w: the code ran longer than %s and was interrupted", context.DeadlineExceeded, req.Timeout)
		}
		return interpreterErr(id, err)
	}
	return nil
}

// codeContext returns the server's id of the sandbox's context name, making
// the context on first use.
func (s *Service) codeContext(ctx context.Context, id, addr, name, language, cwd string) (string, error) {
	if ctxID := s.codeCtx.get(id, name); ctxID != "" {
		return ctxID, nil
	}
	release, err := s.codeCtx.made.lock(ctx, id+"\x00"+name)
	if err != nil {
		return "", err
	}
	defer release()
	if ctxID := s.codeCtx.get(id, name); ctxID != "" {
		return ctxID, nil
	}
	c, err := s.interpreterClient().CreateContext(ctx, addr, language, cwd)
	if err != nil {
		return "", interpreterErr(id, err)
	}
	s.codeCtx.set(id, name, c.ID)
	return c.ID, nil
}

// CodeContext is a named context of a sandbox's interpreter.
type CodeContext struct {
	Name     string
	ID       string // the server's id
	Language string
}

// CreateCodeContext makes the named context in cwd (the server's default
// when empty) unless the sandbox has it already: the name is the key, so a
// retry makes no second context.
func (s *Service) CreateCodeContext(ctx context.Context, id, name, language, cwd string) error {
	if !codeContextName.MatchString(name) {
		return invalidf("context %q is not a context name", name)
	}
	addr, _, err := s.interpreterTarget(ctx, id)
	if err != nil {
		return err
	}
	_, err = s.codeContext(ctx, id, addr, name, language, cwd)
	return err
}

// HasCodeContext reports whether the sandbox has the named context.
func (s *Service) HasCodeContext(id, name string) bool { return s.codeCtx.get(id, name) != "" }

// CodeContexts lists the sandbox's named contexts that its server still has.
func (s *Service) CodeContexts(ctx context.Context, id string) ([]CodeContext, error) {
	addr, _, err := s.interpreterTarget(ctx, id)
	if err != nil {
		return nil, err
	}
	live, err := s.interpreterClient().Contexts(ctx, addr)
	if err != nil {
		return nil, interpreterErr(id, err)
	}
	byID := make(map[string]interpreter.Context, len(live))
	for _, c := range live {
		byID[c.ID] = c
	}
	out := []CodeContext{}
	for name, ctxID := range s.codeCtx.names(id) {
		if c, ok := byID[ctxID]; ok {
			out = append(out, CodeContext{Name: name, ID: ctxID, Language: c.Language})
		}
	}
	return out, nil
}

// DeleteCodeContext removes a named context and its kernel. Removing a name
// that is not there succeeds, so a retried delete answers as the first did.
func (s *Service) DeleteCodeContext(ctx context.Context, id, name string) error {
	if !codeContextName.MatchString(name) {
		return invalidf("context %q is not a context name", name)
	}
	addr, _, err := s.interpreterTarget(ctx, id)
	if err != nil {
		return err
	}
	ctxID := s.codeCtx.get(id, name)
	if ctxID == "" {
		return nil
	}
	err = s.interpreterClient().DeleteContext(ctx, addr, ctxID)
	var se *interpreter.ServerError
	if err != nil && !(errors.As(err, &se) && se.NotFound()) {
		return interpreterErr(id, err)
	}
	s.codeCtx.set(id, name, "")
	return nil
}
