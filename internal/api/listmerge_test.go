package api

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/service"
)

// TestMergePagesPagesThroughEveryRowOnce pages through rows spread over
// three stores the way the cluster router does (each store answers the same
// query, the merged page is cut) and checks that every row is seen exactly
// once, for every page size and both orders.
func TestMergePagesPagesThroughEveryRowOnce(t *testing.T) {
	base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	// Rows a few hundred microseconds apart, so several share a millisecond,
	// dealt to three stores.
	var stores [3][]RowPos
	var all []RowPos
	for i := range 40 {
		p := RowPos{base.Add(time.Duration(i*337) * time.Microsecond), fmt.Sprintf("sb%03d", (i*7)%40)}
		stores[i%3] = append(stores[i%3], p)
		all = append(all, p)
	}
	// page is one store's answer: rows after the token, in order, up to
	// limit, and its next token when it has more.
	page := func(rows []RowPos, token string, desc bool, limit int) ([]RowPos, string) {
		var after *RowPos
		if token != "" {
			at, id, err := service.PagePosition(token)
			if err != nil {
				t.Fatal(err)
			}
			after = &RowPos{at, id}
		}
		sorted := slices.Clone(rows)
		slices.SortFunc(sorted, ComparePos)
		if desc {
			slices.Reverse(sorted)
		}
		var out []RowPos
		for _, r := range sorted {
			c := 0
			if after != nil {
				c = ComparePos(r, *after)
			}
			if after == nil || (!desc && c > 0) || (desc && c < 0) {
				out = append(out, r)
			}
		}
		if len(out) > limit {
			last := out[limit-1]
			return out[:limit], service.PageTokenAfter(last.At, last.ID)
		}
		return out, ""
	}
	exact := func(p RowPos) RowPos { return p }
	for _, tc := range []struct {
		name string
		desc bool
		pos  func(RowPos) RowPos
		cut  func([]RowPos, int) ([]RowPos, string)
	}{
		{"ascending", false, exact, CutExact(exact)},
		{"descending", true, exact, CutExact(exact)},
	} {
		for _, limit := range []int{1, 2, 3, 5, 7, 40, 100} {
			t.Run(fmt.Sprintf("%s limit %d", tc.name, limit), func(t *testing.T) {
				seen := map[string]bool{}
				var got []RowPos
				token := ""
				for range 200 {
					var pages [][]RowPos
					var nexts []string
					for _, s := range stores {
						p, next := page(s, token, tc.desc, limit)
						pages = append(pages, p)
						nexts = append(nexts, next)
					}
					out, next := MergePages(pages, nexts, tc.pos, tc.desc, limit, tc.cut)
					if len(out) > limit {
						t.Fatalf("page of %d rows, limit %d", len(out), limit)
					}
					for _, r := range out {
						if seen[r.ID] {
							t.Fatalf("row %s seen twice", r.ID)
						}
						seen[r.ID] = true
						got = append(got, r)
					}
					if next == "" {
						break
					}
					token = next
				}
				if len(got) != len(all) {
					t.Fatalf("saw %d of %d rows", len(got), len(all))
				}
			})
		}
	}
}
