package gateway

import (
	"net/http"
	"slices"
	"strings"
)

// FacadeList is a listing of one of the compatible surfaces (E2B, Daytona)
// that the router answers for the whole cluster, the way it answers the
// native GET /v1/sandboxes: every live node lists its own sandboxes and
// Merge combines the pages in the surface's own shape and order. The
// surfaces' shapes are not this package's business, so the daemon supplies
// Match and Merge.
type FacadeList struct {
	// Match reports whether r is this listing.
	Match func(r *http.Request) bool
	// Merge writes the answer from the nodes' pages (their 200 bodies and
	// headers).
	Merge func(w http.ResponseWriter, r *http.Request, pages []NodeAnswer)
	// Ask is added to the request each node answers (what Merge needs
	// beyond the public answer).
	Ask http.Header
}

// serveFacadeList answers r if it is one of cfg.Lists, and reports whether
// it did. A request that does not authenticate is left to the surface,
// which refuses it in its own shape.
func (g *Gateway) serveFacadeList(w http.ResponseWriter, r *http.Request, local http.Handler, cfg Config, transport http.RoundTripper) bool {
	i := slices.IndexFunc(cfg.Lists, func(l FacadeList) bool { return l.Match(r) })
	if i < 0 || cfg.Authenticate == nil {
		return false
	}
	p, err := cfg.Authenticate(r)
	if err != nil {
		return false
	}
	var (
		pages   []NodeAnswer
		missing []string
	)
	ask := r
	if len(cfg.Lists[i].Ask) > 0 {
		ask = r.Clone(r.Context())
		for k, v := range cfg.Lists[i].Ask {
			ask.Header[k] = v
		}
	}
	for _, a := range g.fanOut(ask, local, p, &http.Client{Transport: transport}) {
		switch {
		case a.Err == nil:
			pages = append(pages, a)
		case a.Local != nil:
			// This node's refusal (a bad filter, a bad cursor) is the
			// answer: every node would refuse the same query.
			for k, v := range a.Local.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(a.Local.Code)
			_, _ = w.Write(a.Local.Body.Bytes())
			return true
		default:
			g.log.Warn("cluster: list on a node failed", "node", a.Node, "path", r.URL.Path, "err", a.Err)
			missing = append(missing, a.Node)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		w.Header().Set(HeaderPartial, strings.Join(missing, ","))
	}
	cfg.Lists[i].Merge(w, r, pages)
	return true
}
