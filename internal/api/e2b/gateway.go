package e2b

import (
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/interpreter"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// Headers the SDK sets on every agent call when E2B_SANDBOX_URL is set.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
)

// gateway forwards /e2b/envd/<path> to <path> on the sandbox named by the
// E2b-Sandbox-Id header, at the port named by E2b-Sandbox-Port (the agent's
// 49983 when absent). Responses stream through unbuffered.
//
// The client's X-Access-Token passes through untouched and the agent checks
// it: the agent is the one authority on its token, so the gateway neither
// needs the daemon's API key (the SDK does not send it to sandboxes) nor
// weakens the check by injecting the token itself.
//
// Ports other than the agent's are reached only when exposed or when the
// sandbox's port-access policy (E2B creates: every port public, or every
// port with the traffic token) allows it; otherwise 403.
//
// A sandbox that is unknown, paused or otherwise not running answers 502,
// as E2B's edge does: the SDK reads 502 as "the sandbox is not running". A
// paused one made with autoResume is resumed first and then served.
func (h *Handler) gateway(w http.ResponseWriter, r *http.Request, path string) {
	id := r.Header.Get(headerSandboxID)
	if id == "" {
		writeError(w, http.StatusBadRequest, "missing "+headerSandboxID+" header")
		return
	}
	port := agentapi.Port
	if p := r.Header.Get(headerSandboxPort); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			writeError(w, http.StatusBadRequest, headerSandboxPort+" must be a port number")
			return
		}
		port = n
	}
	// The gateway is reached without the daemon's credentials (the agent
	// checks the sandbox's token), so a made-up id is answered from memory,
	// without a query on the store's one connection.
	if !h.be.SandboxKnown(id) {
		writeError(w, http.StatusBadGateway, "sandbox "+id+" not found")
		return
	}
	// A paused sandbox made with autoResume wakes on this request, which
	// waits for it; one without stays paused and is answered as today.
	if _, err := h.be.WakeOnTraffic(r.Context(), id); err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		writeError(w, http.StatusBadGateway, "sandbox "+id+" could not be resumed")
		h.log.Warn("auto-resume", "sandbox", id, "err", err)
		return
	}
	sb, err := h.be.GetSandbox(r.Context(), id)
	switch {
	case errors.Is(err, sandpit.ErrNotFound):
		writeError(w, http.StatusBadGateway, "sandbox "+id+" not found")
		return
	case err != nil:
		fail(w, err, id)
		return
	case sb.State != sandpit.StateRunning:
		writeError(w, http.StatusBadGateway, "sandbox "+id+" is not running (state "+string(sb.State)+")")
		return
	}
	// The agent's port and exposed ports always pass; other ports pass as
	// the sandbox's E2B public-traffic setting says.
	// A private port (one a Daytona signed preview URL was made for) takes
	// its preview token, in Daytona's header, instead of the traffic token.
	cred := r.Header.Get(sandpit.TrafficTokenHeader)
	if tok := r.Header.Get(sandpit.PreviewTokenHeader); tok != "" {
		cred = tok
	}
	if err := h.be.CheckPortAccess(r.Context(), sb, port, cred); err != nil {
		fail(w, err, id)
		return
	}
	r.Header.Del(sandpit.TrafficTokenHeader)
	r.Header.Del(sandpit.PreviewTokenHeader)
	addr, err := h.be.AgentAddr(r.Context(), id)
	if err != nil {
		writeError(w, http.StatusBadGateway, "sandbox "+id+" is not reachable: "+err.Error())
		return
	}
	if port != agentapi.Port {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			fail(w, err, id)
			return
		}
		addr = net.JoinHostPort(host, strconv.Itoa(port))
	}
	if path == "" {
		path = "/"
	}
	if sb.AccessToken != "" && sandpit.NeedsAccessToken(port, path) &&
		subtle.ConstantTimeCompare([]byte(r.Header.Get(sandpit.AccessTokenHeader)), []byte(sb.AccessToken)) != 1 {
		// Running code takes the sandbox's access token, as the agent's
		// routes do; the server itself checks none (see images/code-interpreter).
		writeError(w, http.StatusUnauthorized, "running code needs the sandbox's access token in the "+sandpit.AccessTokenHeader+" header")
		return
	}
	// The sandbox's servers see its host mask (maskRequestHost), as they
	// do through its preview hosts; the agent is not masked.
	host := ""
	if port != agentapi.Port {
		host = service.MaskHost(sb.Network, port)
	}
	h.relay.ToServer(w, r, addr, path, host, func(w http.ResponseWriter, err error) {
		if port == interpreter.Port && interpreter.Refused(err) {
			// 404, not 502: the SDK reads 502 as "the sandbox timed out"
			// and says so, which sends the user looking in the wrong place.
			writeError(w, http.StatusNotFound, "sandbox "+id+" has no code interpreter (nothing listens on port 49999): create it from the code-interpreter-v1 template to run code")
			return
		}
		writeError(w, http.StatusBadGateway, "sandbox agent unreachable: "+err.Error())
	})
}
