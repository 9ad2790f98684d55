package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/sandpit-dev/sandpit/client"
)

// errBadInput is a tool call's argument the server refuses before it calls
// the daemon.
var errBadInput = errors.New("bad input")

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadInput, fmt.Sprintf(format, args...))
}

// toolError turns a failed daemon call into the message a model reads: what
// failed, the kind of failure in plain words, and the daemon's own message.
// The SDK returns it as a tool error (isError), not a protocol error, so
// the model can see it and correct itself.
func toolError(what string, err error) error {
	if errors.Is(err, errBadInput) {
		return err
	}
	var ae *client.Error
	if errors.As(err, &ae) {
		return fmt.Errorf("%s: %s: %s", what, statusKind(ae.Status), ae.Message)
	}
	if ce := new(connect.Error); errors.As(err, &ce) {
		return fmt.Errorf("%s: %s: %s", what, connectKind(ce.Code()), ce.Message())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: timed out", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func statusKind(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge:
		return "bad input"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusTooManyRequests:
		return "over a limit"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	return fmt.Sprintf("daemon error %d", status)
}

func connectKind(c connect.Code) string {
	switch c {
	case connect.CodeNotFound:
		return "not found"
	case connect.CodeInvalidArgument:
		return "bad input"
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition, connect.CodeAborted:
		return "conflict"
	case connect.CodeUnauthenticated:
		return "unauthorized"
	case connect.CodePermissionDenied:
		return "forbidden"
	case connect.CodeDeadlineExceeded:
		return "timed out"
	case connect.CodeUnavailable:
		return "unavailable"
	}
	return c.String()
}
