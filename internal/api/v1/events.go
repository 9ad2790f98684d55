package v1

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/events"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// eventBuffer is how many events one stream may fall behind before it is
// dropped; the client reconnects and lists to catch up.
const eventBuffer = 256

// heartbeat keeps idle streams alive through proxies that cut silent
// connections, and lets a gone client be noticed.
const heartbeat = 15 * time.Second

// toEvent renders a service event in the wire shape.
func toEvent(e events.Event) apitypes.Event {
	if e.IsBuild() {
		return apitypes.Event{Type: string(e.Type), State: string(e.Build.State), Time: e.Time, Node: e.Node,
			TemplateID: e.Template.ID, Template: e.Template.Name, BuildID: e.Build.ID, Error: e.Build.Error}
	}
	out := apitypes.Event{Type: string(e.Type), SandboxID: e.Sandbox.ID, State: string(e.Sandbox.State),
		OldState: string(e.OldState), Time: e.Time, Node: e.Node}
	if e.Gone() {
		out.State = ""
	}
	if d := e.Denial; d != nil {
		out.OldState = ""
		out.Network = &apitypes.Denial{Time: d.Time, Kind: d.Kind, Name: d.Name, Addr: d.Addr, Port: d.Port, Reason: d.Reason, Message: d.String()}
	}
	return out
}

// events serves GET /v1/events: every sandbox state change and template
// build change as Server-Sent Events, one event per change named by its type,
// until the client leaves or the daemon shuts down.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	// The stream is a session of the token: it ends when the token is
	// revoked or expires, and counts against the token's cap.
	ctx, release, err := h.auth.OpenSession(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	defer release()
	rc := http.NewResponseController(w)
	sub := h.svc.Events().Subscribe(eventBuffer)
	defer sub.Close()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The comment line commits the headers, so a client knows it is
	// subscribed before the first change.
	if _, err := fmt.Fprint(w, ": subscribed\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case e, ok := <-sub.C():
			if !ok {
				return // dropped as too slow, or the daemon is shutting down
			}
			if ctx.Err() != nil {
				// Both were ready and select chose the event: a revoked
				// token's stream gets nothing more.
				return
			}
			if !service.CanSeeEvent(r.Context(), e) {
				continue
			}
			b, err := json.Marshal(toEvent(e))
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Type, b); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}
