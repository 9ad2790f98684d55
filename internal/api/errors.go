// Package api holds what the HTTP surfaces share: the one mapping from domain
// errors to HTTP statuses, JSON helpers, body limits and authentication. The
// native API (api/v1) and the facades (api/e2b, api/daytona) render the mapped
// error in their own products' shapes.
package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Problem is a classified error: the HTTP status, a stable machine code and a
// human message.
type Problem struct {
	Status  int
	Code    string
	Message string
}

// Error codes of the native API.
const (
	CodeBadRequest         = "bad_request"
	CodeUnauthorized       = "unauthorized"
	CodeNotFound           = "not_found"
	CodeNameConflict       = "name_conflict"
	CodeHostnameConflict   = "hostname_conflict"
	CodeProtocolConflict   = "port_protocol_conflict"
	CodeConflict           = "conflict"
	CodePortPoolExhausted  = "port_pool_exhausted"
	CodeNotRunning         = "not_running"
	CodeUnknownImage       = "unknown_image"
	CodeUnknownTemplate    = "unknown_template"
	CodeBodyTooLarge       = "body_too_large"
	CodeUpstream           = "upstream_failed"
	CodeInternal           = "internal"
	CodeTimeout            = "timeout"
	CodeKeyMismatch        = "idempotency_key_mismatch"
	CodeKeyInFlight        = "idempotency_key_in_flight"
	CodeInvalidKey         = "invalid_idempotency_key"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeUnsupportedMedia   = "unsupported_media_type"
	CodeServiceUnavailable = "unavailable"
	CodeForbidden          = "forbidden"
	CodeQuotaExceeded      = "quota_exceeded"
	CodeTokenNameTaken     = "token_name_conflict"
	CodeNoLeader           = "no_leader"
)

// ErrBodyTooLarge is returned by DecodeJSON when a body exceeds its limit.
var ErrBodyTooLarge = errors.New("request body too large")

// ErrBadJSON wraps a body that is not the JSON the endpoint takes.
var ErrBadJSON = errors.New("malformed JSON body")

// Classify maps any error the service or store returns to a Problem. This is
// the one place where error kinds meet HTTP statuses.
func Classify(err error) Problem {
	msg := err.Error()
	switch {
	case errors.Is(err, service.ErrUnauthorized):
		// The message is fixed: whatever was presented is never echoed.
		return Problem{http.StatusUnauthorized, CodeUnauthorized, "missing, invalid, revoked or expired token"}
	case errors.Is(err, service.ErrForbidden):
		return Problem{http.StatusForbidden, CodeForbidden, msg}
	case errors.Is(err, sandpit.ErrQuotaExceeded):
		return Problem{http.StatusTooManyRequests, CodeQuotaExceeded, msg}
	case errors.Is(err, service.ErrTokenNameTaken):
		return Problem{http.StatusConflict, CodeTokenNameTaken, msg}
	case errors.Is(err, ErrBodyTooLarge):
		return Problem{http.StatusRequestEntityTooLarge, CodeBodyTooLarge, msg}
	case errors.Is(err, ErrBadJSON), errors.Is(err, service.ErrInvalid), errors.Is(err, store.ErrInvalidPageToken):
		return Problem{http.StatusBadRequest, CodeBadRequest, msg}
	case errors.Is(err, service.ErrUnknownImage):
		return Problem{http.StatusBadRequest, CodeUnknownImage, msg}
	case errors.Is(err, service.ErrUnknownTemplate):
		return Problem{http.StatusBadRequest, CodeUnknownTemplate, msg}
	case errors.Is(err, sandpit.ErrNotFound):
		return Problem{http.StatusNotFound, CodeNotFound, msg}
	case errors.Is(err, sandpit.ErrNameConflict):
		return Problem{http.StatusConflict, CodeNameConflict, msg}
	case errors.Is(err, sandpit.ErrHostnameConflict):
		return Problem{http.StatusConflict, CodeHostnameConflict, msg}
	case errors.Is(err, service.ErrProtocolConflict):
		return Problem{http.StatusConflict, CodeProtocolConflict, msg}
	case errors.Is(err, sandpit.ErrPortPoolExhausted):
		return Problem{http.StatusServiceUnavailable, CodePortPoolExhausted, msg}
	case errors.Is(err, service.ErrNotRunning):
		return Problem{http.StatusConflict, CodeNotRunning, msg}
	case errors.Is(err, service.ErrRuntime), errors.Is(err, service.ErrRouter), errors.Is(err, service.ErrAgentUnhealthy):
		return Problem{http.StatusBadGateway, CodeUpstream, msg}
	case errors.Is(err, sandpit.ErrNoLeader):
		return Problem{http.StatusServiceUnavailable, CodeNoLeader, msg}
	case errors.Is(err, context.DeadlineExceeded):
		return Problem{http.StatusGatewayTimeout, CodeTimeout, msg}
	}
	return Problem{http.StatusInternalServerError, CodeInternal, msg}
}
