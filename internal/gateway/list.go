package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/apitypes"
	"github.com/sandpit-dev/sandpit/internal/api/route"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// HeaderPartial names, on a cluster-wide listing, the nodes that did not
// answer: the listing lacks their sandboxes.
const HeaderPartial = "Sandpit-Partial"

// listAll answers GET /v1/sandboxes for the whole cluster: the same query
// goes to every live node (this one included), and their pages, each in
// (created_at, id) order, are merged into one page of the same order. The
// next page token names the last row returned, which every node's store
// continues from.
type result struct {
	node string
	resp apitypes.ListResponse
	err  error
	raw  *httptest.ResponseRecorder
}

func (g *Gateway) listAll(w http.ResponseWriter, r *http.Request, local http.Handler, p sandpit.Principal, client *http.Client, tokenAfter func(time.Time, string) string, position func(string) (time.Time, string, error)) {
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			local.ServeHTTP(w, r) // the surface refuses it
			return
		}
		limit = n
	}
	answers := g.fanOut(r, local, p, client)
	results := make([]result, 0, len(answers))
	for _, a := range answers {
		res := result{node: a.Node, raw: a.Local, err: a.Err}
		if res.err == nil {
			res.err = json.Unmarshal(a.Body, &res.resp)
		}
		results = append(results, res)
	}
	var (
		all     []apitypes.Sandbox
		more    bool
		missing []string
	)
	for _, res := range results {
		if res.err != nil {
			if res.node == g.node && res.raw != nil {
				// This node's own refusal (a bad token, a bad query) is
				// the answer.
				for k, v := range res.raw.Header() {
					w.Header()[k] = v
				}
				w.WriteHeader(res.raw.Code)
				_, _ = w.Write(res.raw.Body.Bytes())
				return
			}
			g.log.Warn("cluster: list on a node failed", "node", res.node, "err", res.err)
			missing = append(missing, res.node)
			continue
		}
		all = append(all, res.resp.Sandboxes...)
		more = more || res.resp.NextPageToken != ""
	}
	// A node that came back and has not yet taken its lost sandboxes back
	// lists them itself: its row wins over the index's.
	listed := map[string]bool{}
	for _, sb := range all {
		listed[sb.ID] = true
	}
	for _, sb := range g.lostRows(r.URL.Query(), p, position) {
		if !listed[sb.ID] {
			all = append(all, sb)
		}
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
	route.WriteJSON(w, http.StatusOK, out)
}

// NodeAnswer is one node's answer to a request the router sent to every
// node.
type NodeAnswer struct {
	Node string
	// Body is the answer's body when it was 200.
	Body   []byte
	Header http.Header
	// Err is set when the node did not answer 200.
	Err error
	// Local is this node's own answer, whatever its status: its refusal
	// (a bad query) is the refusal of the whole request.
	Local *httptest.ResponseRecorder
}

// fanOut sends the GET r to every live node (this one served in process,
// the others over the cluster port as the principal p) and collects their
// answers. The Host header is the client's, so that URLs a node writes into
// its answer point where the client reached the cluster.
func (g *Gateway) fanOut(r *http.Request, local http.Handler, p sandpit.Principal, client *http.Client) []NodeAnswer {
	pj, _ := json.Marshal(p)
	var (
		mu  sync.Mutex
		out []NodeAnswer
		wg  sync.WaitGroup
	)
	for _, m := range g.cl.Peers() {
		if m.State == "left" || m.Meta.Raft == "" {
			continue
		}
		if m.State != "alive" {
			// A member that failed (and did not leave) still owns its
			// sandboxes: the answer lacks them, and says so.
			mu.Lock()
			out = append(out, NodeAnswer{Node: m.Name, Err: fmt.Errorf("member is %s", m.State)})
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := NodeAnswer{Node: m.Name}
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			if m.Name == g.node {
				rec := httptest.NewRecorder()
				local.ServeHTTP(rec, r.Clone(cluster.WithForwarded(ctx, p)))
				a.Local, a.Header, a.Body = rec, rec.Header(), rec.Body.Bytes()
				if rec.Code != http.StatusOK {
					a.Err = fmt.Errorf("status %d", rec.Code)
				}
			} else {
				a.Header, a.Body, a.Err = g.fetchFrom(ctx, client, m.Name, r, pj)
			}
			mu.Lock()
			out = append(out, a)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (g *Gateway) fetchFrom(ctx context.Context, client *http.Client, node string, r *http.Request, principal []byte) (http.Header, []byte, error) {
	out, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+node+r.URL.RequestURI(), nil)
	if err != nil {
		return nil, nil, err
	}
	out.Host = r.Host
	for k, v := range r.Header {
		// What the client's request carries that shapes the answer; its
		// credentials stay behind (the principal travels instead).
		if k == "X-cluster.Forwarded-Proto" || k == "Accept" || strings.HasPrefix(k, "Sandpit-Row-") {
			out.Header[k] = v
		}
	}
	out.Header.Set(cluster.HeaderForwardedBy, g.node)
	out.Header.Set(cluster.HeaderPrincipal, string(principal))
	resp, err := client.Do(out)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.Header, body, err
}

// lostRows are the sandboxes the index holds as lost with their node. No
// live node's store lists them, yet their owner must find them to delete
// them (which frees their names), so the listing shows them with state
// "lost", following the query's label and state filters and page position.
// A query the surface would refuse yields none; the local answer refuses it.
func (g *Gateway) lostRows(q url.Values, p sandpit.Principal, position func(string) (time.Time, string, error)) []apitypes.Sandbox {
	if st := q.Get("state"); st != "" && !slices.Contains(strings.Split(st, ","), cluster.PlacementLost) {
		return nil
	}
	labels := map[string]string{}
	for _, kv := range q["label"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil
		}
		labels[k] = v
	}
	var (
		after   time.Time
		afterID string
	)
	if tok := q.Get("page_token"); tok != "" {
		if position == nil {
			return nil
		}
		at, id, err := position(tok)
		if err != nil {
			return nil
		}
		after, afterID = at, id
	}
	var out []apitypes.Sandbox
	for _, pl := range g.idx.Placements(labels) {
		if pl.State != cluster.PlacementLost || !p.Admin && pl.Owner != p.Owner {
			continue
		}
		if afterID != "" && (pl.CreatedAt.Before(after) || pl.CreatedAt.Equal(after) && pl.SandboxID <= afterID) {
			continue
		}
		l := pl.Labels
		if l == nil {
			l = map[string]string{}
		}
		out = append(out, apitypes.Sandbox{
			ID: pl.SandboxID, Name: pl.Name, Image: pl.Image, State: cluster.PlacementLost, Labels: l, Env: map[string]string{},
			CreatedAt: pl.CreatedAt, UpdatedAt: pl.CreatedAt, Node: pl.Node,
		})
	}
	return out
}
