package e2b

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/filesig"
)

// SignedFiles serves /files at the root of the daemon's API listener. With
// E2B_SANDBOX_URL set, the SDK builds upload and download URLs as
// new URL('/files', E2B_SANDBOX_URL): the gateway's path prefix is dropped
// and, since the URL is meant to be used without the SDK, no E2b-Sandbox-Id
// header is sent either. What identifies the sandbox is the signature: it is
// keyed with the sandbox's access token, so the one running sandbox whose
// token reproduces it is the one the URL was made for (found in the store's
// in-memory index, never by a query). Its agent then checks
// the signature and expiry again, as it does for every signed request. In a
// cluster the node that receives the URL asks the others which of them runs
// that sandbox (cluster.HeaderSignedProbe) and forwards it there.
func (h *Handler) SignedFiles(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(headerSandboxID) != "" {
		h.gateway(w, r, "/files")
		return
	}
	q := r.URL.Query()
	if q.Get(filesig.ParamSignature) == "" {
		writeError(w, http.StatusBadRequest, "/files needs a signed URL (sandbox.downloadUrl or uploadUrl) or the "+headerSandboxID+" header")
		return
	}
	id, err := h.signer(r.Context(), r.Method, q)
	if err != nil {
		fail(w, err, "")
		return
	}
	if _, forwarded := cluster.Forwarded(r.Context()); forwarded && r.Header.Get(cluster.HeaderSignedProbe) != "" {
		// Another node of the cluster asks whether a sandbox here made the
		// signature, to forward the request to the one that did.
		if id == "" {
			w.WriteHeader(http.StatusNotFound)
		} else {
			w.WriteHeader(http.StatusNoContent)
		}
		return
	}
	if id == "" {
		writeError(w, http.StatusUnauthorized, "the signature matches no running sandbox")
		return
	}
	r.Header.Set(headerSandboxID, id)
	h.gateway(w, r, "/files")
}

// signer returns the running sandbox whose access token made the signature
// in q, or "" when none did. The service answers from memory, so a stream of
// made-up signatures costs hashing, not queries on the store's connection.
func (h *Handler) signer(_ context.Context, method string, q url.Values) (string, error) {
	return h.be.SignedFilesSandbox(method, q), nil
}
