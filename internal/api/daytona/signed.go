package daytona

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/api"
)

// Signed preview URLs: http://<port>-<token>.<domain>, where the token is
// <sandbox id>-<expiry>-<mac>: the expiry in Unix seconds (base 36) and an
// HMAC of sandbox, port and expiry truncated to 100 bits (20 base32
// characters). The key is derived from the daemon's preview secret
// (<data-dir>/preview-key), so a URL stays valid across daemon restarts and
// removing that file revokes every URL. One URL is revoked early by storing
// its token (expireSignedPreviewUrl); the store keeps it across restarts.
// The proxy gate (PreviewGate) checks the token, and that it was not
// revoked, and rewrites the Host to the port's ordinary preview host before
// the router sees it.

const (
	defaultSignedExpiry = 60 * time.Second
	maxSignedExpiry     = 24 * time.Hour
	signedMACLen        = 20
)

var macEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// signingKey derives the preview-signing key from the daemon's preview
// secret; without one (a handler built outside the daemon) a random secret
// stands in, and the URLs end with the handler.
func signingKey(secret []byte) []byte {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sandpit daytona signed preview url v1"))
	return m.Sum(nil)
}

func (h *sandboxAPI) previewMAC(id string, port int, exp int64) string {
	m := hmac.New(sha256.New, h.signKey)
	m.Write([]byte(id + "\x00" + strconv.Itoa(port) + "\x00" + strconv.FormatInt(exp, 10)))
	return macEncoding.EncodeToString(m.Sum(nil))[:signedMACLen]
}

func (h *sandboxAPI) signPreview(id string, port int, exp time.Time) string {
	e := exp.Unix()
	return id + "-" + strconv.FormatInt(e, 36) + "-" + h.previewMAC(id, port, e)
}

// signedOutcome is the result of checking a preview host label.
type signedOutcome int

const (
	notSigned signedOutcome = iota // an ordinary preview label
	signedValid
	signedInvalid // shaped like a signed token, but forged or expired
)

// splitSigned splits a signed token into sandbox id, expiry and MAC,
// checking only its shape.
func splitSigned(token string) (id string, exp int64, mac string, ok bool) {
	i := strings.LastIndexByte(token, '-')
	if i <= 0 || len(token)-i-1 != signedMACLen {
		return "", 0, "", false
	}
	mac, rest := token[i+1:], token[:i]
	j := strings.LastIndexByte(rest, '-')
	if j <= 0 {
		return "", 0, "", false
	}
	id, expS := rest[:j], rest[j+1:]
	exp, err := strconv.ParseInt(expS, 36, 64)
	if err != nil {
		return "", 0, "", false
	}
	return id, exp, mac, true
}

// SignedPreviewSandbox names the sandbox a signed preview host label
// ("<port>-<token>") is for, without checking the signature: a cluster node
// uses it to find the owner, whose gate then checks the signature with the
// key that made it.
func SignedPreviewSandbox(label string) (string, bool) {
	portS, token, found := strings.Cut(label, "-")
	if !found {
		return "", false
	}
	if _, err := strconv.Atoi(portS); err != nil {
		return "", false
	}
	id, _, _, ok := splitSigned(token)
	return id, ok
}

// ValidSignedPreviewHost reports whether host is a signed preview host of
// this daemon whose signature holds and has not expired (revocation aside):
// the builtin router's TLS issues certificates for such hosts only, so a
// forged label costs no certificate.
func (h *Handler) ValidSignedPreviewHost(host string) bool {
	portS, token, found := strings.Cut(sandpit.ParsePreviewHost(host, h.svc.Config().Domain).Label, "-")
	if !found {
		return false
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return false
	}
	_, outcome := h.sandboxes.verifySigned(port, token, time.Now())
	return outcome == signedValid
}

// verifySigned checks the token part of a "<port>-<token>" label.
func (h *sandboxAPI) verifySigned(port int, token string, now time.Time) (string, signedOutcome) {
	id, exp, mac, ok := splitSigned(token)
	if !ok {
		return "", notSigned
	}
	if !hmac.Equal([]byte(mac), []byte(h.previewMAC(id, port, exp))) || now.Unix() > exp {
		return id, signedInvalid
	}
	return id, signedValid
}

// SignedPreviewURL is the answer of GET .../signed-preview-url.
type SignedPreviewURL struct {
	SandboxID string `json:"sandboxId"`
	Port      int    `json:"port"`
	Token     string `json:"token"`
	URL       string `json:"url"`
}

func (h *sandboxAPI) signedPreviewURL(w http.ResponseWriter, r *http.Request) {
	expiry := defaultSignedExpiry
	if s := r.URL.Query().Get("expiresInSeconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || time.Duration(n)*time.Second > maxSignedExpiry {
			WriteError(w, r, badRequest("expiresInSeconds must be an integer from 1 to %d", int(maxSignedExpiry/time.Second)))
			return
		}
		expiry = time.Duration(n) * time.Second
	}
	// The URL reaches the port only once it is exposed. The exposure is
	// private: a signed URL that can be expired would be pointless if the
	// port's plain preview hosts served it to anyone.
	sb, p, _, ok := h.exposeHTTP(w, r, true)
	if !ok {
		return
	}
	token := h.signPreview(sb.ID, p.Port, time.Now().Add(expiry))
	// The exposure's URL with its host label swapped for the signed one.
	u := p.PublicURL
	if _, rest, ok := strings.Cut(u, "://"); ok {
		if k := strings.IndexByte(rest, '.'); k > 0 {
			u = u[:len(u)-len(rest)] + strconv.Itoa(p.Port) + "-" + token + rest[k:]
		}
	}
	api.WriteJSON(w, http.StatusOK, SignedPreviewURL{SandboxID: sb.ID, Port: p.Port, Token: token, URL: u})
}

// expireSignedPreviewURL is POST .../ports/{port}/signed-preview-url/{token}/expire:
// the token stops working at once. Only a token the daemon signed for this
// sandbox and port is accepted; anything else is a 400 that records nothing.
func (h *sandboxAPI) expireSignedPreviewURL(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		WriteError(w, r, badRequest("port must be an integer from 1 to 65535"))
		return
	}
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	token := r.PathValue("token")
	id, exp, mac, ok := splitSigned(token)
	if !ok || id != sb.ID || !hmac.Equal([]byte(mac), []byte(h.previewMAC(id, port, exp))) {
		WriteError(w, r, badRequest("%q is not a signed preview token of sandbox %s port %d", token, sb.ID, port))
		return
	}
	if err := h.svc.RevokeSignedPreview(r.Context(), sb.ID, token, time.Unix(exp, 0)); err != nil {
		WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// PreviewGate wraps the preview proxy: a signed preview host is checked and
// rewritten to the port's ordinary host (a forged or expired one is a 403
// that never reaches the sandbox), and every request for a sandbox counts
// as activity for its auto-stop. A revoked token is a 403 too; when the
// store cannot say whether it was revoked the gate fails closed (503). The
// host is read once (sandpit.ResolvePreviewHost): by the cluster's gateway
// in front of the gate when there is one, else here, and the reading goes on
// with the request to the handlers behind the gate.
func (h *Handler) PreviewGate(next http.Handler) http.Handler {
	return h.sandboxes.previewGate(next)
}

func (h *sandboxAPI) previewGate(next http.Handler) http.Handler {
	domain := h.svc.Config().Domain
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ctx, fresh := sandpit.ResolvePreviewHost(r.Context(), r.Host, domain)
		if fresh {
			r = r.WithContext(ctx)
		}
		label := p.Label
		if label == "" {
			next.ServeHTTP(w, r)
			return
		}
		if portS, token, found := strings.Cut(label, "-"); found {
			if port, err := strconv.Atoi(portS); err == nil {
				id, outcome := h.verifySigned(port, token, time.Now())
				switch outcome {
				case signedInvalid:
					http.Error(w, "sandpit: the signed preview URL is invalid or has expired", http.StatusForbidden)
					return
				case signedValid:
					revoked, err := h.svc.SignedPreviewRevoked(r.Context(), token)
					if err != nil {
						h.log.Warn("check signed preview revocation", "sandbox", id, "err", err)
						http.Error(w, "sandpit: cannot check the signed preview URL now", http.StatusServiceUnavailable)
						return
					}
					if revoked {
						http.Error(w, "sandpit: the signed preview URL has been expired", http.StatusForbidden)
						return
					}
					// The port is private: the signed URL stands in for
					// its preview token, which the router checks.
					ptok, err := h.svc.PreviewToken(r.Context(), id, port)
					if err != nil {
						h.log.Warn("read preview token", "sandbox", id, "err", err)
						http.Error(w, "sandpit: cannot check the signed preview URL now", http.StatusServiceUnavailable)
						return
					}
					h.svc.Touch(r.Context(), id, false)
					// The request now names the port's ordinary host;
					// the reading behind the gate is of that host.
					r.Host = h.svc.PreviewHost(id, port)
					r = r.WithContext(sandpit.WithPreviewHost(r.Context(), sandpit.ParsePreviewHost(r.Host, domain)))
					r.Header.Del(sandpit.PreviewTokenHeader)
					if ptok != "" {
						r.Header.Set(sandpit.PreviewTokenHeader, ptok)
					}
					next.ServeHTTP(w, r)
					return
				}
			}
		}
		if p.OK {
			h.svc.Touch(r.Context(), p.SandboxID, false)
		}
		next.ServeHTTP(w, r)
	})
}
