package daytona

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// Signed file URLs (sandbox.downloadUrl, uploadUrl): the SDK signs them
// with the sandbox's signing key (GET /sandbox/{id}/signing-key), and
// anyone holding one downloads or uploads that one file without a token.

// signedFilePath matches the two operations a signed URL may name, under
// the toolbox prefix: /toolbox/{id}/files/download and .../upload-v2.
var signedFilePath = regexp.MustCompile(`^/toolbox/([^/]+)/files/(download|upload-v2)$`)

// SignedFileRequest reports whether a request (its path below the facade's
// prefix) is a signed file URL: served on the strength of its signature, so
// the daemon's limits count it as unauthenticated.
func SignedFileRequest(rest string, q url.Values) bool {
	return q.Get("signature") != "" && signedFilePath.MatchString(rest)
}

// signed authorizes a signed file URL: a valid signature of the sandbox's
// current key, for this method and path, not expired, lets the request act
// as the sandbox's owner for this one operation (the route fixes which).
// It answers whether the request was one, and the authorized request.
func (h *Handler) signed(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	rest := r.URL.Path[len(h.prefix):]
	q := r.URL.Query()
	m := signedFilePath.FindStringSubmatch(rest)
	if m == nil || q.Get("signature") == "" || api.BearerToken(r) != "" {
		return r, false
	}
	method := http.MethodGet
	if m[2] == "upload-v2" {
		method = http.MethodPost
	}
	if r.Method != method {
		WriteError(w, r, &problem{status: http.StatusMethodNotAllowed, message: "a signed " + m[2] + " URL is for " + method, source: sourceDaemon})
		return nil, true
	}
	sb, err := h.sandboxes.svc.SignedFileSandbox(r.Context(), m[1], method, q.Get("path"), q.Get("expires"), q.Get("signature"))
	if err != nil {
		WriteError(w, r, err)
		return nil, true
	}
	p := sandpit.Principal{TokenName: "signed-url", Owner: sb.Owner, Scopes: []string{sandpit.ScopeSandboxesWrite}}
	return r.WithContext(sandpit.WithPrincipal(r.Context(), p)), true
}

// signingKey serves GET /sandbox/{idOrName}/signing-key.
func (h *sandboxAPI) signingKey(w http.ResponseWriter, r *http.Request) {
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	key, err := h.svc.SigningKey(r.Context(), sb.ID)
	if err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, key)
}

// rotateSigningKey serves POST /sandbox/{idOrName}/signing-key/rotate.
func (h *sandboxAPI) rotateSigningKey(w http.ResponseWriter, r *http.Request) {
	sb, err := h.lookup(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	key, err := h.svc.RotateSigningKey(r.Context(), sb.ID)
	if err != nil {
		WriteError(w, r, lookupError(err, r.PathValue("idOrName")))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, key)
}

// download serves GET /toolbox/{id}/files/download?path=: the file's bytes.
func (h *toolboxAPI) download(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	if path == "" {
		WriteError(w, r, badRequest("path is required"))
		return
	}
	agent, err := h.agent(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://"+agent.Addr+"/files?path="+url.QueryEscape(path), nil)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	req.Header.Set(accessTokenHeader, agent.Token)
	resp, err := h.svc.AgentHTTP().Do(req)
	if err != nil {
		WriteError(w, r, &problem{status: http.StatusBadGateway, message: fmt.Sprintf("%s: sandbox agent unreachable: %v", path, err), code: codeFileReadFailed, source: sourceDaemon})
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		WriteError(w, r, agentHTTPError(resp, path))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment")
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, resp.Body)
}

// uploadOne serves POST /toolbox/{id}/files/upload-v2?path=: the first
// part named "file" of a multipart body becomes the file at path.
func (h *toolboxAPI) uploadOne(w http.ResponseWriter, r *http.Request) {
	httpguard.LiftReadDeadline(w)
	path := r.URL.Query().Get("path")
	if path == "" {
		WriteError(w, r, badRequest("path is required"))
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		WriteError(w, r, badRequest("upload takes a multipart/form-data body with a file part: %v", err))
		return
	}
	agent, err := h.agent(r)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			WriteError(w, r, badRequest("the multipart body has no part named file"))
			return
		}
		if err != nil {
			WriteError(w, r, badRequest("malformed multipart body: %v", err))
			return
		}
		if part.FormName() != "file" {
			_, _ = io.Copy(io.Discard, part)
			continue
		}
		if err := h.writeFile(r.Context(), agent.Addr, agent.Token, path, part); err != nil {
			WriteError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusOK)
		return
	}
}
