package gateway

import (
	"net/http"
	"slices"
	"strings"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/api/route"
)

// serveMerged answers a listing or an event stream for the whole cluster,
// and reports whether it did. A request that does not authenticate is left
// to the surface, which refuses it in its own shape.
func (g *Gateway) serveMerged(w http.ResponseWriter, r *http.Request, local http.Handler, cfg Config, transport http.RoundTripper, rt Target) bool {
	if cfg.Authenticate == nil {
		return false
	}
	p, err := cfg.Authenticate(r)
	if err != nil {
		return false
	}
	client := &http.Client{Transport: transport}
	switch {
	case rt.Locate == route.LocateEvents:
		g.serveEvents(w, r, local, p, client)
	case rt.Merge != nil:
		g.serveFacadeList(w, r, local, p, client, rt.Merge, rt.Ask)
	case cfg.ListToken != nil:
		g.listAll(w, r, local, p, client, cfg.ListToken, cfg.ListPosition)
	default:
		return false
	}
	return true
}

// serveFacadeList answers a facade's listing (E2B, Daytona) for the whole
// cluster, the way the native listing is: every live node lists its own
// sandboxes, and the surface's merge combines the pages in its own shape and
// order.
func (g *Gateway) serveFacadeList(w http.ResponseWriter, r *http.Request, local http.Handler, p sandpit.Principal, client *http.Client, merge func(http.ResponseWriter, *http.Request, []route.NodePage), ask http.Header) {
	var (
		pages   []route.NodePage
		missing []string
	)
	asked := r
	if len(ask) > 0 {
		asked = r.Clone(r.Context())
		for k, v := range ask {
			asked.Header[k] = v
		}
	}
	for _, a := range g.fanOut(asked, local, p, client) {
		switch {
		case a.Err == nil:
			pages = append(pages, route.NodePage{Node: a.Node, Header: a.Header, Body: a.Body})
		case a.Local != nil:
			// This node's refusal (a bad filter, a bad cursor) is the
			// answer: every node would refuse the same query.
			for k, v := range a.Local.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(a.Local.Code)
			_, _ = w.Write(a.Local.Body.Bytes())
			return
		default:
			g.log.Warn("cluster: list on a node failed", "node", a.Node, "path", r.URL.Path, "err", a.Err)
			missing = append(missing, a.Node)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		w.Header().Set(HeaderPartial, strings.Join(missing, ","))
	}
	merge(w, r, pages)
}
