package daytona

import (
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// SSHAccess is Daytona's SshAccessDto: a short-lived token that logs into
// the sandbox over the daemon's SSH endpoint (`ssh TOKEN@HOST -p PORT`).
type SSHAccess struct {
	ID         string `json:"id"`
	SandboxID  string `json:"sandboxId"`
	Token      string `json:"token"`
	ExpiresAt  string `json:"expiresAt"`
	CreatedAt  string `json:"createdAt"`
	UpdatedAt  string `json:"updatedAt"`
	SSHCommand string `json:"sshCommand"`
}

// SSHAccessValidation is Daytona's SshAccessValidationDto.
type SSHAccessValidation struct {
	Valid     bool   `json:"valid"`
	SandboxID string `json:"sandboxId"`
}

// sshEndpoint is the host and port clients reach the SSH endpoint at, or an
// error in Daytona's shape when the daemon serves none.
func (h *sandboxAPI) sshEndpoint() (host, port string, err error) {
	if h.sshAddr == "" {
		return "", "", notImplemented("SSH access is not available: the daemon serves no SSH endpoint (start it with --ssh-listen)")
	}
	host, port, err = net.SplitHostPort(h.sshAddr)
	if err != nil {
		return "", "", err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = h.sshHost
	}
	return host, port, nil
}

// createSSHAccess answers POST /sandbox/{id}/ssh-access?expiresInMinutes=N
// (sandbox.createSshAccess): a new token each call, as on Daytona, valid
// for N minutes (default 60, at most a day).
func (h *sandboxAPI) createSSHAccess(w http.ResponseWriter, r *http.Request) {
	// The sandbox first: another owner learns nothing, not even whether
	// the daemon serves SSH.
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	host, port, err := h.sshEndpoint()
	if err != nil {
		WriteError(w, r, err)
		return
	}
	minutes := 60
	if q := r.URL.Query().Get("expiresInMinutes"); q != "" {
		if minutes, err = strconv.Atoi(q); err != nil || minutes <= 0 {
			WriteError(w, r, badRequest("expiresInMinutes must be a positive whole number of minutes"))
			return
		}
	}
	a, err := h.svc.CreateSSHAccess(r.Context(), sb.ID, time.Duration(minutes)*time.Minute)
	if err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	now := time.Now().UTC().Format(isoMillis)
	cmd := "ssh " + a.Token + "@" + host
	if port != "22" {
		cmd = "ssh -p " + port + " " + a.Token + "@" + host
	}
	api.WriteJSON(w, http.StatusOK, SSHAccess{
		ID: a.ID, SandboxID: a.SandboxID, Token: a.Token,
		ExpiresAt: a.ExpiresAt.UTC().Format(isoMillis), CreatedAt: now, UpdatedAt: now, SSHCommand: cmd,
	})
}

// revokeSSHAccess answers DELETE /sandbox/{id}/ssh-access?token=T
// (sandbox.revokeSshAccess): that token, or without one every token of the
// sandbox, stops admitting logins and ends its sessions.
func (h *sandboxAPI) revokeSSHAccess(w http.ResponseWriter, r *http.Request) {
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	if token := r.URL.Query().Get("token"); token != "" {
		err = h.svc.RevokeSSHToken(r.Context(), sb.ID, token)
	} else {
		err = h.svc.RevokeSSHAccess(r.Context(), sb.ID)
	}
	if err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	api.WriteJSON(w, http.StatusOK, h.toSandbox(r, sb, true))
}

// validateSSHAccess answers GET /sandbox/ssh-access/validate?token=T
// (daytona.validateSshAccess): whether the token logs into one of the
// caller's sandboxes, and which.
func (h *sandboxAPI) validateSSHAccess(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	if token == "" {
		WriteError(w, r, badRequest("token is required"))
		return
	}
	id, valid, err := h.svc.ValidateSSHAccess(r.Context(), token)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, SSHAccessValidation{Valid: valid, SandboxID: id})
}
