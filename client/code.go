package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/sandpit-dev/sandpit/apitypes"
)

type (
	// CodeRequest runs code on a sandbox's code interpreter.
	CodeRequest = apitypes.CodeRequest
	// CodeEvent is one line of an execution's stream.
	CodeEvent = apitypes.CodeEvent
	// CodeContext is a named interpreter context.
	CodeContext = apitypes.CodeContext
)

// Execution is a finished run of code: what it printed, its results (the
// cell's value and every display call, such as a chart) and its exception.
type Execution struct {
	Stdout  []string
	Stderr  []string
	Results []CodeEvent
	// Error is the code's uncaught exception, nil when it ran through.
	Error          *CodeEvent
	ExecutionCount int
}

// Text is the plain text of the cell's value ("" when it has none).
func (e Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

// RunCode runs code on the sandbox's code interpreter (a sandbox made from
// the code-interpreter-v1 template) and returns the execution once it
// ends. onEvent, when set, sees each line as it streams. Code is never
// retried: running it twice is not the same as once.
func (c *Client) RunCode(ctx context.Context, id string, req CodeRequest, onEvent func(CodeEvent)) (Execution, error) {
	var ex Execution
	lw := &lineWriter{fn: func(line []byte) error {
		var ev CodeEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("decode code event: %w", err)
		}
		switch ev.Type {
		case "stdout":
			ex.Stdout = append(ex.Stdout, ev.Text)
		case "stderr":
			ex.Stderr = append(ex.Stderr, ev.Text)
		case "result":
			ex.Results = append(ex.Results, ev)
		case "error":
			e := ev
			ex.Error = &e
		case "number_of_executions":
			ex.ExecutionCount = ev.ExecutionCount
		}
		if onEvent != nil {
			onEvent(ev)
		}
		return nil
	}}
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sandboxes/" + url.PathEscape(id) + "/code", body: req}, lw)
	if err == nil {
		err = lw.flush()
	}
	return ex, err
}

// CodeContexts lists the sandbox's named interpreter contexts.
func (c *Client) CodeContexts(ctx context.Context, id string) ([]CodeContext, error) {
	var out []CodeContext
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + url.PathEscape(id) + "/code/contexts", idempotent: true}, &out)
	return out, err
}

// DeleteCodeContext removes a named context and its state.
func (c *Client) DeleteCodeContext(ctx context.Context, id, name string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/sandboxes/" + url.PathEscape(id) + "/code/contexts/" + url.PathEscape(name), idempotent: true}, nil)
	return err
}

// lineWriter splits what is written into lines and hands each to fn.
type lineWriter struct {
	buf []byte
	fn  func([]byte) error
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := bytes.TrimSpace(w.buf[:i])
		w.buf = w.buf[i+1:]
		if len(line) == 0 {
			continue
		}
		if err := w.fn(line); err != nil {
			return 0, err
		}
	}
}

// flush hands on a last line that had no newline.
func (w *lineWriter) flush() error {
	line := bytes.TrimSpace(w.buf)
	w.buf = nil
	if len(line) == 0 {
		return nil
	}
	return w.fn(line)
}
