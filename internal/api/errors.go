// Package api holds what the HTTP surfaces share: the one mapping from domain
// errors to HTTP statuses, JSON helpers, body limits and authentication. The
// native API (api/v1) and the facades (api/e2b, api/daytona) render the mapped
// error in their own products' shapes.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"

	"github.com/sandpit-dev/sandpit/internal/api/route"
	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/idempotency"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/templates"
	"github.com/sandpit-dev/sandpit/internal/volumes"
)

// Problem is a classified error: the HTTP status, a stable machine code (one
// of apitypes' codes) and a human message.
type Problem struct {
	Status  int
	Code    string
	Message string
}

// Error makes a decided Problem an error, so that it is rendered by the
// same WriteError as any other.
func (p Problem) Error() string { return p.Message }

// WriteError renders err in the native API's error shape, with the status and
// code of Classify and, for a problem a client should retry as it is, a
// Retry-After header. This is the native surface's one error renderer; the
// facades have their own (e2b.WriteError, daytona.WriteError) with the same
// signature, so a gateway in front of them picks one by surface. The native
// shape names no path, so r is not read and may be nil.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	p := Classify(err)
	if ra := p.RetryAfter(); ra != "" {
		// The Go client retries a 503 that names a delay with the same
		// Idempotency-Key.
		w.Header().Set("Retry-After", ra)
	}
	WriteJSON(w, p.Status, apitypes.ErrorBody{Error: apitypes.ErrorDetail{Code: p.Code, Message: p.Message}})
}

// ErrBodyTooLarge is returned by DecodeJSON when a body exceeds its limit.
var ErrBodyTooLarge = errors.New("request body too large")

// ErrBadJSON wraps a body that is not the JSON the endpoint takes.
var ErrBadJSON = errors.New("malformed JSON body")

// Classify maps any error the service or store returns to a Problem. This is
// the one place where error kinds meet HTTP statuses.
func Classify(err error) Problem {
	// A problem a handler decided itself (a missing endpoint, a bad header)
	// is already classified.
	var decided Problem
	if errors.As(err, &decided) {
		return decided
	}
	// The gateway decides its problems in the route declarations' leaf,
	// which it shares with the surfaces without compiling them.
	var routed route.Problem
	if errors.As(err, &routed) {
		return Problem(routed)
	}
	msg := err.Error()
	switch {
	case errors.Is(err, sandpit.ErrUnauthorized):
		// The message is fixed: whatever was presented is never echoed.
		return Problem{http.StatusUnauthorized, apitypes.CodeUnauthorized, "missing, invalid, revoked or expired token"}
	case errors.Is(err, sandpit.ErrForbidden):
		return Problem{http.StatusForbidden, apitypes.CodeForbidden, msg}
	case errors.Is(err, sandpit.ErrQuotaExceeded):
		return Problem{http.StatusTooManyRequests, apitypes.CodeQuotaExceeded, msg}
	case errors.Is(err, identity.ErrTokenNameTaken):
		return Problem{http.StatusConflict, apitypes.CodeTokenNameConflict, msg}
	case errors.Is(err, ErrBodyTooLarge):
		return Problem{http.StatusRequestEntityTooLarge, apitypes.CodeBodyTooLarge, msg}
	case errors.Is(err, ErrBadJSON), errors.Is(err, sandpit.ErrInvalid), errors.Is(err, sandpit.ErrInvalidPageToken), errors.Is(err, cluster.ErrBadRequest):
		return Problem{http.StatusBadRequest, apitypes.CodeBadRequest, msg}
	case errors.Is(err, sandpit.ErrUnknownImage):
		return Problem{http.StatusBadRequest, apitypes.CodeUnknownImage, msg}
	case errors.Is(err, sandpit.ErrUnknownTemplate):
		return Problem{http.StatusBadRequest, apitypes.CodeUnknownTemplate, msg}
	case errors.Is(err, sandpit.ErrImageBuilding):
		// The template exists and will be served: the same request
		// succeeds once the build is done.
		return Problem{http.StatusServiceUnavailable, apitypes.CodeServiceUnavailable, msg}
	case errors.Is(err, sandpit.ErrNotFound):
		return Problem{http.StatusNotFound, apitypes.CodeNotFound, msg}
	case errors.Is(err, sandpit.ErrNameConflict):
		return Problem{http.StatusConflict, apitypes.CodeNameConflict, msg}
	case errors.Is(err, sandpit.ErrHostnameConflict):
		return Problem{http.StatusConflict, apitypes.CodeHostnameConflict, msg}
	case errors.Is(err, ErrInvalidKey):
		return Problem{http.StatusBadRequest, apitypes.CodeInvalidKey, msg}
	case errors.Is(err, idempotency.ErrKeyMismatch):
		return Problem{http.StatusUnprocessableEntity, apitypes.CodeKeyMismatch, msg}
	case errors.Is(err, idempotency.ErrKeyInFlight):
		return Problem{http.StatusConflict, apitypes.CodeKeyInFlight, msg}
	case errors.Is(err, sandpit.ErrSandboxExists), errors.Is(err, sandpit.ErrClaimLost), errors.Is(err, service.ErrCreateInProgress):
		// A retry racing its own first attempt: the request is being done,
		// by another attempt. Never a server fault.
		return Problem{http.StatusConflict, apitypes.CodeConflict, msg}
	case errors.Is(err, sandpit.ErrSSHKeyTaken):
		return Problem{http.StatusConflict, apitypes.CodeSSHKeyTaken, msg}
	case errors.Is(err, sandpit.ErrVolumeInUse):
		return Problem{http.StatusConflict, apitypes.CodeVolumeInUse, msg}
	case errors.Is(err, sandpit.ErrVolumeNotReady):
		return Problem{http.StatusConflict, apitypes.CodeConflict, msg}
	case errors.Is(err, volumes.ErrVolumesUnavailable):
		return Problem{http.StatusNotImplemented, apitypes.CodeServiceUnavailable, msg}
	case errors.Is(err, sandpit.ErrBuildConflict):
		return Problem{http.StatusConflict, apitypes.CodeBuildConflict, msg}
	case errors.Is(err, sandpit.ErrSnapshotInUse):
		return Problem{http.StatusConflict, apitypes.CodeInUse, msg}
	case errors.Is(err, templates.ErrTooLarge):
		return Problem{http.StatusRequestEntityTooLarge, apitypes.CodeBodyTooLarge, msg}
	case errors.Is(err, templates.ErrBuildsUnavailable):
		return Problem{http.StatusNotImplemented, apitypes.CodeServiceUnavailable, msg}
	case errors.Is(err, service.ErrPortInUse):
		return Problem{http.StatusConflict, apitypes.CodeConflict, msg}
	case errors.Is(err, service.ErrProtocolConflict):
		return Problem{http.StatusConflict, apitypes.CodeProtocolConflict, msg}
	case errors.Is(err, service.ErrPortForbidden):
		return Problem{http.StatusForbidden, apitypes.CodePortForbidden, msg}
	case errors.Is(err, sandpit.ErrPortPoolExhausted):
		return Problem{http.StatusServiceUnavailable, apitypes.CodePortPoolExhausted, msg}
	case errors.Is(err, service.ErrNoInterpreter):
		return Problem{http.StatusConflict, apitypes.CodeNoInterpreter, msg}
	case errors.Is(err, service.ErrPaused):
		return Problem{http.StatusConflict, apitypes.CodeSandboxPaused, msg}
	case errors.Is(err, service.ErrStopped):
		return Problem{http.StatusConflict, apitypes.CodeSandboxStopped, msg}
	case errors.Is(err, service.ErrNotRunning):
		return Problem{http.StatusConflict, apitypes.CodeNotRunning, msg}
	case errors.Is(err, service.ErrEngineTimeout), errors.Is(err, context.DeadlineExceeded):
		return Problem{http.StatusGatewayTimeout, apitypes.CodeTimeout, msg}
	case errors.Is(err, service.ErrRuntime), errors.Is(err, service.ErrRouter), errors.Is(err, service.ErrAgentUnhealthy):
		return Problem{http.StatusBadGateway, apitypes.CodeUpstream, upstreamMessage(err)}
	case errors.Is(err, sandpit.ErrSandboxLost):
		return Problem{http.StatusGone, apitypes.CodeSandboxLost, msg}
	case errors.Is(err, sandpit.ErrNoLeader):
		return Problem{http.StatusServiceUnavailable, apitypes.CodeNoLeader, msg}
	case errors.Is(err, sandpit.ErrNoCapacity):
		return Problem{http.StatusServiceUnavailable, apitypes.CodeNoCapacity, msg}
	}
	return Problem{http.StatusInternalServerError, apitypes.CodeInternal, msg}
}

// upstreamMessage is what a caller learns of a failed dependency: which
// step failed, in the daemon's words, never the engine's or the router's
// own text, which describes the host (paths, other tenants' containers,
// the engine's configuration). That text goes to the daemon's log instead.
func upstreamMessage(err error) string {
	var ee *service.EngineError
	switch {
	case errors.As(err, &ee):
		slog.Warn("container engine failed", "step", ee.What, "err", ee.Err)
		return service.ErrRuntime.Error() + ": " + ee.What + " (the engine's error is in the daemon's log)"
	case errors.Is(err, service.ErrRouter):
		slog.Warn("router failed", "err", err)
		return service.ErrRouter.Error() + " (the router's error is in the daemon's log)"
	}
	return err.Error()
}

// RetryAfter is the Retry-After header value (seconds) that goes with a
// problem a client should retry as it is, or "" for none. Every surface sets
// it, so the SDKs that honour it back off instead of failing.
func (p Problem) RetryAfter() string {
	switch p.Code {
	case apitypes.CodeNoLeader:
		// An election takes about a second.
		return "1"
	case apitypes.CodeNoCapacity:
		// Room comes back when a sandbox is deleted or a node undrained,
		// on a human's time scale.
		return "5"
	}
	return ""
}
