package daytona

import (
	"context"
	"net/http"

	"github.com/sandpit-dev/sandpit"
)

// openStream registers a long-lived socket of the request (a terminal, an
// interpreter run, a followed log) as a session of the token it was
// authenticated with, before the upgrade, so a token at its cap of sessions
// gets a 429 rather than a socket. The returned context ends when the daemon
// shuts down or the token is revoked or expires; the socket's reads and
// writes run under it, so either closes the socket. release must be called
// when the socket ends.
func (h *processAPI) openStream(w http.ResponseWriter, r *http.Request) (context.Context, func(), bool) {
	// Under the daemon's lifetime, not the request's: a hijacked
	// connection's request context says nothing about the socket.
	base := h.ctx
	if p, ok := sandpit.PrincipalFrom(r.Context()); ok {
		base = sandpit.WithPrincipal(base, p)
	}
	ctx, release, err := h.auth.OpenSession(base)
	if err != nil {
		WriteError(w, r, err)
		return nil, nil, false
	}
	return ctx, release, true
}
