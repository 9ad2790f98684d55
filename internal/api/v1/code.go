package v1

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/interpreter"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// codeRoutes are the code interpreter's: running code streams the
// interpreter's lines as they come, and contexts are named by the caller.
func (h *Handler) codeRoutes() {
	route := h.routes.Handle
	route("POST /v1/sandboxes/{id}/code", sandpit.ActionExecute, h.runCode)
	route("GET /v1/sandboxes/{id}/code/contexts", sandpit.ActionRead, h.codeContexts)
	route("DELETE /v1/sandboxes/{id}/code/contexts/{name}", sandpit.ActionExecute, h.deleteCodeContext)
}

func (h *Handler) runCode(w http.ResponseWriter, r *http.Request) {
	var req apitypes.CodeRequest
	if err := api.DecodeJSON(r, &req, true); err != nil {
		fail(w, err)
		return
	}
	if req.TimeoutS < 0 {
		fail(w, errors.Join(sandpit.ErrInvalid, errors.New("timeout_s must not be negative")))
		return
	}
	flusher, _ := w.(http.Flusher)
	started := false
	err := h.svc.RunCode(r.Context(), r.PathValue("id"), service.CodeRequest{
		Code: req.Code, Language: req.Language, Context: req.Context, Env: req.Env, Timeout: time.Duration(req.TimeoutS) * time.Second,
	}, func(ev interpreter.Event) error {
		if !started {
			// The status is sent with the first line, so that whatever
			// fails before the code runs (no interpreter, a bad context)
			// is an ordinary error answer.
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if _, err := w.Write(append(ev.Raw, '\n')); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	switch {
	case err == nil && !started:
		// The server ended the stream without a line: the answer is an
		// empty execution.
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	case err != nil && !started:
		fail(w, err)
	case err != nil && r.Context().Err() == nil:
		// Mid-stream, the failure is the stream's last line.
		name := "SandpitError"
		if errors.Is(err, context.DeadlineExceeded) {
			name = "TimeoutError"
		}
		line, _ := json.Marshal(apitypes.CodeEvent{Type: interpreter.EventError, Name: name, Value: err.Error()})
		_, _ = w.Write(append(line, '\n'))
	}
}

func (h *Handler) codeContexts(w http.ResponseWriter, r *http.Request) {
	cs, err := h.svc.CodeContexts(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	out := make([]apitypes.CodeContext, 0, len(cs))
	for _, c := range cs {
		out = append(out, apitypes.CodeContext{Name: c.Name, Language: c.Language})
	}
	api.WriteJSON(w, http.StatusOK, out)
}

func (h *Handler) deleteCodeContext(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.DeleteCodeContext(r.Context(), r.PathValue("id"), r.PathValue("name")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
