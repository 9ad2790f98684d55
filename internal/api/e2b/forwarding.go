package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// forwarding declares how a cluster forwards the facade's requests beyond
// its sandbox routes: creates are placed so that duplicates meet (see
// createAffinity), the listings cover every node, the sandbox gateway goes
// to the sandbox its header names, and every other path under a sandbox
// goes to its owner (so that a sandbox lost with its node answers as lost).
func (h *Handler) forwarding() {
	for _, p := range []string{"POST /v2/sandboxes", "POST /sandboxes"} {
		h.routes.Forward(p, api.Forwarding{Locate: api.LocateCreate, Affinity: createAffinity, Template: api.TemplateField("templateID"), Volumes: api.VolumeRefs("volumeMounts", "name")})
	}
	h.routes.Forward("GET /v2/sandboxes", api.Forwarding{Locate: api.LocateList, Merge: mergeList(true)})
	h.routes.Forward("GET /sandboxes", api.Forwarding{Locate: api.LocateList, Merge: mergeList(false)})
	h.routes.Declare("/envd", api.Forwarding{Locate: api.LocateHeader, Header: headerSandboxID})
	h.routes.Declare("/envd/", api.Forwarding{Locate: api.LocateHeader, Header: headerSandboxID})
	for _, p := range []string{"/sandboxes/{id}", "/sandboxes/{id}/", "/v2/sandboxes/{id}", "/v2/sandboxes/{id}/"} {
		h.routes.Declare(p, api.Forwarding{Locate: api.LocateSandbox})
	}
}

// RootRoutes are the facade's routes at the origin's root (mounted without
// its prefix): the SDK's file calls, which name their sandbox in a header,
// and its signed file URLs, which name none.
func (h *Handler) RootRoutes() []api.Route {
	rs := api.NewRoutes(http.NewServeMux(), nil, nil)
	rs.Declare("/files", api.Forwarding{Locate: api.LocateHeader, Header: headerSandboxID, Signature: "signature"})
	return rs.Forwarded()
}

type decodedCreateKey struct{}

// createAffinity names a create for the cluster's placement: its
// Idempotency-Key, or else the fingerprint of its body, under which the
// facade deduplicates identical creates, so that they meet on one node. The
// body is decoded as the create handler decodes it and handed to it in the
// request's context, so a create served on this node is decoded once.
func createAffinity(r *http.Request, body []byte) (*http.Request, string) {
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		return r, k
	}
	probe := r.Clone(r.Context())
	probe.Body = io.NopCloser(bytes.NewReader(body))
	var b CreateBody
	if api.DecodeJSON(probe, &b, false) != nil {
		// The handler refuses it, in its own words.
		return r, ""
	}
	return r.WithContext(context.WithValue(r.Context(), decodedCreateKey{}, b)), Fingerprint(KeyIdentity(r.Header.Get("X-API-KEY")), b)
}

// decodeCreate decodes a create's body, or takes the one createAffinity
// decoded already.
func decodeCreate(r *http.Request, b *CreateBody) error {
	if d, ok := r.Context().Value(decodedCreateKey{}).(CreateBody); ok {
		*b = d
		return nil
	}
	return api.DecodeJSON(r, b, false)
}

// mergeList merges the nodes' answers to a listing: GET /sandboxes lists
// everything in one answer, GET /v2/sandboxes (paged) pages with limit and
// X-Next-Token, newest first unless order=asc.
func mergeList(paged bool) func(http.ResponseWriter, *http.Request, []api.NodePage) {
	return func(w http.ResponseWriter, r *http.Request, answers []api.NodePage) {
		var (
			pages [][]ListedSandbox
			nexts []string
		)
		for _, a := range answers {
			var page []ListedSandbox
			if json.Unmarshal(a.Body, &page) != nil {
				continue
			}
			pages = append(pages, page)
			if paged {
				nexts = append(nexts, a.Header.Get("X-Next-Token"))
			}
		}
		limit := 0
		if paged {
			limit = api.QueryLimit(r)
		}
		pos := func(s ListedSandbox) api.RowPos { return api.RowPos{At: s.StartedAt, ID: s.SandboxID} }
		out, next := api.MergePages(pages, nexts, pos, r.URL.Query().Get("order") != "asc", limit, api.CutExact(pos))
		if out == nil {
			out = []ListedSandbox{}
		}
		if next != "" {
			w.Header().Set("X-Next-Token", next)
		}
		api.WriteJSON(w, http.StatusOK, out)
	}
}
