package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
)

// HeaderPartial names, on a cluster-wide listing, the nodes that did not
// answer: the listing lacks their sandboxes.
const HeaderPartial = "Sandpit-Partial"

// listAll answers GET /v1/sandboxes for the whole cluster: the same query
// goes to every live node (this one included), and their pages, each in
// (created_at, id) order, are merged into one page of the same order. The
// next page token names the last row returned, which every node's store
// continues from.
func (c *Cluster) listAll(w http.ResponseWriter, r *http.Request, local http.Handler, p sandpit.Principal, client *http.Client, tokenAfter func(time.Time, string) string) {
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			local.ServeHTTP(w, r) // the surface refuses it
			return
		}
		limit = n
	}
	pj, _ := json.Marshal(p)
	type result struct {
		node string
		resp apitypes.ListResponse
		err  error
		raw  *httptest.ResponseRecorder
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	for _, m := range c.gossip.Members() {
		if m.State != "alive" || m.Meta.Raft == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := result{node: m.Name}
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			if m.Name == c.cfg.NodeName {
				rec := httptest.NewRecorder()
				local.ServeHTTP(rec, r.Clone(context.WithValue(ctx, forwardedKey{}, p)))
				res.raw = rec
				if rec.Code != http.StatusOK {
					res.err = fmt.Errorf("status %d", rec.Code)
				} else {
					res.err = json.Unmarshal(rec.Body.Bytes(), &res.resp)
				}
			} else {
				out, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.Name+r.URL.RequestURI(), nil)
				if err == nil {
					out.Header.Set(HeaderForwardedBy, c.cfg.NodeName)
					out.Header.Set(HeaderPrincipal, string(pj))
					var resp *http.Response
					if resp, err = client.Do(out); err == nil {
						if resp.StatusCode != http.StatusOK {
							err = fmt.Errorf("status %d", resp.StatusCode)
						} else {
							err = json.NewDecoder(resp.Body).Decode(&res.resp)
						}
						resp.Body.Close()
					}
				}
				res.err = err
			}
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		}()
	}
	wg.Wait()
	var (
		all     []apitypes.Sandbox
		more    bool
		missing []string
	)
	for _, res := range results {
		if res.err != nil {
			if res.node == c.cfg.NodeName && res.raw != nil {
				// This node's own refusal (a bad token, a bad query) is
				// the answer.
				for k, v := range res.raw.Header() {
					w.Header()[k] = v
				}
				w.WriteHeader(res.raw.Code)
				_, _ = w.Write(res.raw.Body.Bytes())
				return
			}
			c.log.Warn("cluster: list on a node failed", "node", res.node, "err", res.err)
			missing = append(missing, res.node)
			continue
		}
		all = append(all, res.resp.Sandboxes...)
		more = more || res.resp.NextPageToken != ""
	}
	slices.SortFunc(all, func(a, b apitypes.Sandbox) int {
		if d := a.CreatedAt.Compare(b.CreatedAt); d != 0 {
			return d
		}
		return cmp.Compare(a.ID, b.ID)
	})
	out := apitypes.ListResponse{Sandboxes: all}
	if len(all) > limit {
		out.Sandboxes, more = all[:limit], true
	}
	if more && len(out.Sandboxes) > 0 {
		last := out.Sandboxes[len(out.Sandboxes)-1]
		out.NextPageToken = tokenAfter(last.CreatedAt, last.ID)
	}
	if out.Sandboxes == nil {
		out.Sandboxes = []apitypes.Sandbox{}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		w.Header().Set(HeaderPartial, strings.Join(missing, ","))
	}
	writeJSON(w, http.StatusOK, out)
}
