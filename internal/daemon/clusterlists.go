package daemon

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/api"
	"github.com/sandpit-dev/sandpit/internal/api/daytona"
	"github.com/sandpit-dev/sandpit/internal/api/e2b"
	"github.com/sandpit-dev/sandpit/internal/gateway"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// The E2B and Daytona listings of a cluster node answer for every node, as
// the native listing does: the router asks every live node for the same
// page and these functions merge the answers in each surface's own shape.

// listDefaultLimit is the page size the facades' listings use when the
// query names none (the store's default).
const listDefaultLimit = 100

// rowPos is a row's place in a listing's (created, id) order.
type rowPos struct {
	at time.Time
	id string
}

func comparePos(a, b rowPos) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// mergePages merges the nodes' pages of one listing into one page of the
// same order. A node whose page stopped short of its end (it named a next
// token) saw nothing past where it stopped, so the merged page ends there
// too, and the next token continues from there for every node; a page then
// longer than limit ends at limit and continues after its last row.
// cut shortens a page longer than limit and names the token that continues
// after it.
func mergePages[T any](pages [][]T, nexts []string, pos func(T) rowPos, desc bool, limit int, cut func(all []T, limit int) ([]T, string)) ([]T, string) {
	order := func(a, b rowPos) int {
		if desc {
			return comparePos(b, a)
		}
		return comparePos(a, b)
	}
	var all []T
	for _, p := range pages {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(a, b T) int { return order(pos(a), pos(b)) })
	var (
		frontier *rowPos
		next     string
	)
	for _, tok := range nexts {
		at, id, err := store.PagePosition(tok)
		if err != nil {
			continue
		}
		if p := (rowPos{at, id}); frontier == nil || order(p, *frontier) < 0 {
			frontier, next = &p, tok
		}
	}
	if frontier != nil {
		all = slices.DeleteFunc(all, func(t T) bool { return order(pos(t), *frontier) > 0 })
	}
	if limit > 0 && len(all) > limit {
		all, next = cut(all, limit)
	}
	return all, next
}

// cutExact ends a page of rows whose positions are exact at limit.
func cutExact[T any](pos func(T) rowPos) func([]T, int) ([]T, string) {
	return func(all []T, limit int) ([]T, string) {
		last := pos(all[limit-1])
		return all[:limit], store.PageTokenAfter(last.at, last.id)
	}
}

func queryLimit(r *http.Request) int {
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 {
		return n
	}
	return listDefaultLimit
}

// clusterLists are the facades' listings the cluster router merges.
func clusterLists() []gateway.FacadeList {
	return []gateway.FacadeList{
		{
			// E2B: GET /sandboxes lists everything in one answer, GET
			// /v2/sandboxes pages with limit and X-Next-Token, newest first
			// unless order=asc.
			Match: func(r *http.Request) bool {
				return r.Method == http.MethodGet && (r.URL.Path == e2b.Prefix+"/sandboxes" || r.URL.Path == e2b.Prefix+"/v2/sandboxes")
			},
			Merge: func(w http.ResponseWriter, r *http.Request, answers []gateway.NodeAnswer) {
				paged := r.URL.Path == e2b.Prefix+"/v2/sandboxes"
				var (
					pages [][]e2b.ListedSandbox
					nexts []string
				)
				for _, a := range answers {
					var page []e2b.ListedSandbox
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
					limit = queryLimit(r)
				}
				pos := func(s e2b.ListedSandbox) rowPos { return rowPos{s.StartedAt, s.SandboxID} }
				out, next := mergePages(pages, nexts, pos, r.URL.Query().Get("order") != "asc", limit, cutExact(pos))
				if out == nil {
					out = []e2b.ListedSandbox{}
				}
				if next != "" {
					w.Header().Set("X-Next-Token", next)
				}
				api.WriteJSON(w, http.StatusOK, out)
			},
		},
		{
			// Daytona: GET /sandbox pages with limit and cursor, oldest
			// first.
			Match: func(r *http.Request) bool {
				return r.Method == http.MethodGet && r.URL.Path == daytona.DefaultPrefix+"/sandbox"
			},
			Ask: http.Header{daytona.HeaderRowPositions: {"1"}},
			Merge: func(w http.ResponseWriter, r *http.Request, answers []gateway.NodeAnswer) {
				var (
					pages [][]daytona.Sandbox
					nexts []string
					// createdAt has milliseconds; each node says where its
					// rows sit exactly.
					exact = map[string]time.Time{}
				)
				for _, a := range answers {
					var page daytona.ListResponse
					if json.Unmarshal(a.Body, &page) != nil {
						continue
					}
					_ = json.Unmarshal([]byte(a.Header.Get(daytona.HeaderRowPositions)), &exact)
					pages = append(pages, page.Items)
					if page.NextCursor != nil {
						nexts = append(nexts, *page.NextCursor)
					}
				}
				pos := func(s daytona.Sandbox) rowPos {
					if at, ok := exact[s.ID]; ok {
						return rowPos{at, s.ID}
					}
					at, _ := time.Parse(time.RFC3339Nano, s.CreatedAt)
					return rowPos{at, s.ID}
				}
				out, next := mergePages(pages, nexts, pos, false, queryLimit(r), cutExact(pos))
				resp := daytona.ListResponse{Items: out}
				if resp.Items == nil {
					resp.Items = []daytona.Sandbox{}
				}
				if next != "" {
					resp.NextCursor = &next
				}
				api.WriteJSON(w, http.StatusOK, resp)
			},
		},
	}
}
