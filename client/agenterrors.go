package client

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/sandpit-dev/sandpit/apitypes"
)

// daemonErrors is the HTTP client of the agent protocol's Connect clients.
// The daemon answers some calls itself before any agent is reached (409
// sandbox_paused, 404 for another owner's sandbox), in the native error
// shape, which a Connect client reduces to "HTTP status 409 Conflict": such
// an answer is returned as the *Error it names instead, which the Connect
// error wraps, so errors.As and IsCode find it.
type daemonErrors struct{ h *http.Client }

func (d daemonErrors) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.h.Do(req)
	if err != nil || resp.StatusCode < 300 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp, err
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	var eb apitypes.ErrorBody
	if rerr == nil && json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		return nil, &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	// Not the daemon's shape (a Connect error of the agent's own): the
	// Connect client reads it as usual.
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}
