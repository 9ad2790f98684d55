package daytona

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
)

// forwarding declares how a cluster forwards the facade's requests beyond
// its sandbox routes: a create is placed by capacity (or by its
// Idempotency-Key), the listing covers every node, and every other path
// under a sandbox or its toolbox goes to its owner (so that a sandbox lost
// with its node answers as lost whatever is asked of it).
func (h *Handler) forwarding() {
	h.routes.Forward("POST /sandbox", api.Forwarding{Locate: api.LocateCreate, Template: api.TemplateField("snapshot"), Volumes: api.VolumeRefs("volumes", "volumeId")})
	h.routes.Forward("GET /sandbox", api.Forwarding{Locate: api.LocateList, Merge: mergeList, Ask: http.Header{HeaderRowPositions: {"1"}}})
	// A snapshot's {idOrName} names an image, not a sandbox.
	h.routes.Forward("GET /snapshots/{idOrName}", api.Forwarding{Locate: api.LocateLocal})
	// A token names no sandbox in its path: the node it reaches checks it.
	h.routes.Forward("GET /sandbox/ssh-access/validate", api.Forwarding{Locate: api.LocateLocal})
	h.routes.Declare("/snapshots/{idOrName}/", api.Forwarding{Locate: api.LocateLocal})
	for _, p := range []string{"/sandbox/{idOrName}", "/sandbox/{idOrName}/", "/toolbox/{id}/"} {
		h.routes.Declare(p, api.Forwarding{Locate: api.LocateSandbox})
	}
}

// mergeList merges the nodes' answers to GET /sandbox, which pages with
// limit and cursor, oldest first. createdAt has milliseconds; each node says
// where its rows sit exactly (HeaderRowPositions).
func mergeList(w http.ResponseWriter, r *http.Request, answers []api.NodePage) {
	var (
		pages [][]Sandbox
		nexts []string
		exact = map[string]time.Time{}
	)
	for _, a := range answers {
		var page ListResponse
		if json.Unmarshal(a.Body, &page) != nil {
			continue
		}
		_ = json.Unmarshal([]byte(a.Header.Get(HeaderRowPositions)), &exact)
		pages = append(pages, page.Items)
		if page.NextCursor != nil {
			nexts = append(nexts, *page.NextCursor)
		}
	}
	pos := func(s Sandbox) api.RowPos {
		if at, ok := exact[s.ID]; ok {
			return api.RowPos{At: at, ID: s.ID}
		}
		at, _ := time.Parse(time.RFC3339Nano, s.CreatedAt)
		return api.RowPos{At: at, ID: s.ID}
	}
	out, next := api.MergePages(pages, nexts, pos, false, api.QueryLimit(r), api.CutExact(pos))
	resp := ListResponse{Items: out}
	if resp.Items == nil {
		resp.Items = []Sandbox{}
	}
	if next != "" {
		resp.NextCursor = &next
	}
	api.WriteJSON(w, http.StatusOK, resp)
}
