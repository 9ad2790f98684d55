// Package interpreter is the daemon's client of the code interpreter server
// that runs inside code-interpreter sandboxes on port 49999. The server
// speaks the protocol of E2B's code interpreter, the one the
// @e2b/code-interpreter SDK uses: POST /execute streams one JSON object per
// line (stdout, stderr, results, errors, the execution count), and
// /contexts creates, lists, restarts and removes the kernels' contexts.
//
// The E2B facade forwards the SDK's requests to the server untouched; the
// native API and the Daytona facade go through this client, so that the
// three surfaces run code on the same kernels.
package interpreter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
)

// Port is where the server listens inside the sandbox (E2B's port).
const Port = 49999

// AccessTokenHeader carries the sandbox's access token on /execute, as the
// E2B SDK sends it.
const AccessTokenHeader = "X-Access-Token"

// ErrUnavailable means nothing answers on the interpreter's port: the
// sandbox was not made from an interpreter template, or its server died.
var ErrUnavailable = errors.New("no code interpreter is listening in the sandbox")

// Request is one execution, in the server's field names.
type Request struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	Env       map[string]string `json:"env_vars,omitempty"`
}

// Event is one line of an execution's stream. Raw is the whole line as the
// server wrote it, which is what a caller that relays the stream passes on;
// the typed fields are what the daemon itself reads.
type Event struct {
	Type string `json:"type"`
	// Text is a stdout or stderr chunk, or a result's plain-text form.
	Text string `json:"text,omitempty"`
	// An error's exception name, value and traceback.
	Name      string          `json:"name,omitempty"`
	Value     string          `json:"value,omitempty"`
	Traceback json.RawMessage `json:"traceback,omitempty"`
	// A result's main flag (the cell's value rather than a display call),
	// its PNG (base64) and the chart the server read from the figure.
	IsMainResult   bool            `json:"is_main_result,omitempty"`
	PNG            string          `json:"png,omitempty"`
	Chart          json.RawMessage `json:"chart,omitempty"`
	ExecutionCount int             `json:"execution_count,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// Event types the daemon reads; the server may send others, which are
// relayed as they are.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventResult = "result"
	EventError  = "error"
)

// TracebackText renders an error's traceback, which servers send either as
// one string or as a list of lines.
func (e Event) TracebackText() string {
	if len(e.Traceback) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(e.Traceback, &s) == nil {
		return s
	}
	var lines []string
	if json.Unmarshal(e.Traceback, &lines) == nil {
		return strings.Join(lines, "\n")
	}
	return string(e.Traceback)
}

// Context is one of the server's execution contexts (a kernel).
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// Client calls the server of one sandbox at a time.
type Client struct {
	// HTTP must not have a timeout: an execution streams for as long as
	// the code runs, bounded by the caller's context.
	HTTP *http.Client
}

// Execute runs req on the server at addr (host:port) and calls fn with each
// line of the stream, in order, until the execution ends. An fn error stops
// the stream and is returned. Ending ctx disconnects, which makes the server
// interrupt the code.
func (c Client) Execute(ctx context.Context, addr, token string, req Request, fn func(Event) error) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/execute", bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if token != "" {
		hreq.Header.Set(AccessTokenHeader, token)
	}
	res, err := c.do(hreq)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	// A result line carries a whole PNG or HTML table in base64 or text.
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("code interpreter: a line of its stream is not JSON: %w", err)
		}
		ev.Raw = append(json.RawMessage(nil), line...)
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("code interpreter: the stream broke: %w", err)
	}
	return nil
}

// CreateContext starts a new context of language (the server's default
// when empty) in cwd.
func (c Client) CreateContext(ctx context.Context, addr, language, cwd string) (Context, error) {
	body, _ := json.Marshal(map[string]string{"language": language, "cwd": cwd})
	var out Context
	err := c.call(ctx, http.MethodPost, "http://"+addr+"/contexts", body, &out)
	return out, err
}

// Contexts lists the server's contexts.
func (c Client) Contexts(ctx context.Context, addr string) ([]Context, error) {
	var out []Context
	err := c.call(ctx, http.MethodGet, "http://"+addr+"/contexts", nil, &out)
	return out, err
}

// DeleteContext removes a context and its kernel.
func (c Client) DeleteContext(ctx context.Context, addr, id string) error {
	return c.call(ctx, http.MethodDelete, "http://"+addr+"/contexts/"+id, nil, nil)
}

// RestartContext restarts a context's kernel, which forgets its state.
func (c Client) RestartContext(ctx context.Context, addr, id string) error {
	return c.call(ctx, http.MethodPost, "http://"+addr+"/contexts/"+id+"/restart", nil, nil)
}

func (c Client) call(ctx context.Context, method, url string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("code interpreter: unreadable answer: %w", err)
	}
	return nil
}

// ServerError is a non-2xx answer of the server, with its message.
type ServerError struct {
	Status  int
	Message string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("code interpreter: %s (HTTP %d)", e.Message, e.Status)
}

// NotFound reports whether the server did not know what was named (a
// context that is gone).
func (e *ServerError) NotFound() bool { return e.Status == http.StatusNotFound }

func (c Client) do(req *http.Request) (*http.Response, error) {
	res, err := c.HTTP.Do(req)
	if err != nil {
		if refused(err) {
			return nil, ErrUnavailable
		}
		return nil, fmt.Errorf("code interpreter unreachable: %w", err)
	}
	if res.StatusCode/100 != 2 {
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		msg := strings.TrimSpace(string(b))
		// The server answers errors as {"error": "..."} or {"message": "..."}.
		var shaped struct {
			Error   any    `json:"error"`
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &shaped) == nil {
			switch {
			case shaped.Message != "":
				msg = shaped.Message
			case shaped.Error != nil:
				msg = fmt.Sprint(shaped.Error)
			}
		}
		return nil, &ServerError{Status: res.StatusCode, Message: msg}
	}
	return res, nil
}

// refused reports a connection the sandbox refused: nothing listens there.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// Refused reports whether err is a refused connection: nothing listens on
// the port, which on Port means the sandbox has no interpreter.
func Refused(err error) bool { return refused(err) }
