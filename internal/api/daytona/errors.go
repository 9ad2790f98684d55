package daytona

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/templates"
)

// ErrorBody is Daytona's error shape. The SDK shows message and picks the
// error class from the status; code and source, when present, select a more
// precise class (DaytonaFileNotFoundError, ...).
type ErrorBody struct {
	Path       string `json:"path"`
	Timestamp  string `json:"timestamp"`
	StatusCode int    `json:"statusCode"`
	Error      string `json:"error"`
	Message    string `json:"message"`
	Code       string `json:"code,omitempty"`
	Source     string `json:"source,omitempty"`
}

// sourceDaemon marks errors of the toolbox (Daytona's in-sandbox daemon).
const sourceDaemon = "DAYTONA_DAEMON"

// Toolbox error codes the SDK maps to precise error classes.
const (
	codeFileNotFound     = "FILE_NOT_FOUND"
	codeFileAccessDenied = "FILE_ACCESS_DENIED"
	codeInvalidFilePath  = "INVALID_FILE_PATH"
	codeFileReadFailed   = "FILE_READ_FAILED"
	codeExecTimeout      = "PROCESS_EXECUTION_TIMEOUT"
	codeCommandCompleted = "COMMAND_ALREADY_COMPLETED"
	// codeNotImplemented marks a call the facade knows but cannot serve.
	codeNotImplemented = "not_implemented"
)

// problem is an error already decided: status, message and optional code.
type problem struct {
	status  int
	message string
	code    string
	source  string
}

func (p *problem) Error() string { return p.message }

// newProblem builds a decided error.
func newProblem(status int, format string, args ...any) *problem {
	return &problem{status: status, message: fmt.Sprintf(format, args...)}
}

// badRequest is a 400 that wraps sandpit.ErrInvalid, so that it classifies as
// bad input wherever it ends up.
func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sandpit.ErrInvalid, fmt.Sprintf(format, args...))
}

// WriteError renders an error in Daytona's shape: the Daytona surface's one
// error renderer, which the cluster's gateway also calls for the requests it
// refuses before they reach this handler. The status comes from
// api.Classify, the one mapping of error kinds to statuses, except for errors
// this package has already decided (*problem); a few messages are rewritten
// into the sentences Daytona's own server uses, which users may match on.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	var p *problem
	if errors.Is(err, templates.ErrBuildsUnavailable) {
		// A daemon without an image builder cannot build an Image.
		p = &problem{status: http.StatusNotImplemented, message: err.Error(), code: codeNotImplemented}
	}
	if p == nil && !errors.As(err, &p) {
		c := api.Classify(err)
		p = &problem{status: c.Status, message: c.Message}
		if ra := c.RetryAfter(); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
	}
	api.WriteJSON(w, p.status, ErrorBody{
		Path:       r.URL.Path,
		Timestamp:  time.Now().UTC().Format(isoMillis),
		StatusCode: p.status,
		Error:      http.StatusText(p.status),
		Message:    p.message,
		Code:       p.code,
		Source:     p.source,
	})
}

// lookupError turns a failed id-or-name lookup into Daytona's sentence.
func lookupError(err error, idOrName string) error {
	if errors.Is(err, sandpit.ErrNotFound) {
		return &problem{status: http.StatusNotFound, message: fmt.Sprintf("Sandbox with ID or name %s not found", idOrName)}
	}
	return err
}

// isNotFound reports whether err is a decided 404 (lookupError's).
func isNotFound(err error) bool {
	var p *problem
	return errors.As(err, &p) && p.status == http.StatusNotFound
}

// nameConflict is Daytona's 409 for a duplicate name.
func nameConflict(name string) error {
	return &problem{status: http.StatusConflict, message: fmt.Sprintf("Sandbox with name %s already exists", name)}
}

// notImplemented is the 501 of a call the facade knows but cannot serve
// here, so that users see why rather than a 404.
func notImplemented(message string) error {
	return &problem{status: http.StatusNotImplemented, message: message, code: codeNotImplemented}
}
