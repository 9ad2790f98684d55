package api

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/service"
)

// The E2B and Daytona listings of a cluster node answer for every node, as
// the native listing does: the gateway asks every live node for the same
// page and each surface's Merge (see Forwarding) merges the answers in its
// own shape, with these helpers.

// listDefaultLimit is the page size the facades' listings use when the
// query names none (the store's default).
const listDefaultLimit = 100

// RowPos is a row's place in a listing's (created, id) order.
type RowPos struct {
	At time.Time
	ID string
}

func ComparePos(a, b RowPos) int {
	if c := a.At.Compare(b.At); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// MergePages merges the nodes' pages of one listing into one page of the
// same order. A node whose page stopped short of its end (it named a next
// token) saw nothing past where it stopped, so the merged page ends there
// too, and the next token continues from there for every node; a page then
// longer than limit ends at limit and continues after its last row.
// cut shortens a page longer than limit and names the token that continues
// after it.
func MergePages[T any](pages [][]T, nexts []string, pos func(T) RowPos, desc bool, limit int, cut func(all []T, limit int) ([]T, string)) ([]T, string) {
	order := func(a, b RowPos) int {
		if desc {
			return ComparePos(b, a)
		}
		return ComparePos(a, b)
	}
	var all []T
	for _, p := range pages {
		all = append(all, p...)
	}
	slices.SortFunc(all, func(a, b T) int { return order(pos(a), pos(b)) })
	var (
		frontier *RowPos
		next     string
	)
	for _, tok := range nexts {
		at, id, err := service.PagePosition(tok)
		if err != nil {
			continue
		}
		if p := (RowPos{at, id}); frontier == nil || order(p, *frontier) < 0 {
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

// CutExact ends a page of rows whose positions are exact at limit.
func CutExact[T any](pos func(T) RowPos) func([]T, int) ([]T, string) {
	return func(all []T, limit int) ([]T, string) {
		last := pos(all[limit-1])
		return all[:limit], service.PageTokenAfter(last.At, last.ID)
	}
}

func QueryLimit(r *http.Request) int {
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 {
		return n
	}
	return listDefaultLimit
}
