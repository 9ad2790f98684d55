package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sandpit-dev/sandpit"
	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// probeTimeout bounds the wait for one node's answer to a probe.
const probeTimeout = 3 * time.Second

// signedFilesOwner finds the node whose sandbox signed the file URL of r,
// which names no sandbox: the E2B SDK's downloadUrl and uploadUrl put only
// the signature, made with the sandbox's access token, in the URL. This node
// is asked first (in process), then every other live node over the cluster
// port, all at once; "" means no node claims it, and the request is served
// here (its answer says so).
func (g *Gateway) signedFilesOwner(r *http.Request, local http.Handler, client *http.Client) string {
	probe := func(ctx context.Context, node string) bool {
		req, err := http.NewRequestWithContext(ctx, r.Method, r.URL.String(), http.NoBody)
		if err != nil {
			return false
		}
		req.Header.Set(cluster.HeaderSignedProbe, "1")
		req.Header.Set(cluster.HeaderForwardedBy, g.node)
		req.Header.Set(cluster.HeaderPrincipal, cluster.AnonymousPrincipal)
		if node == g.node {
			req = req.WithContext(cluster.WithForwarded(ctx, sandpit.Principal{}))
			rec := httptest.NewRecorder()
			local.ServeHTTP(rec, req)
			return rec.Code == http.StatusNoContent
		}
		req.URL.Scheme, req.URL.Host = "http", node
		res, err := client.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusNoContent
	}
	if probe(r.Context(), g.node) {
		return g.node
	}
	ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
	defer cancel()
	found := make(chan string)
	asked := 0
	for _, m := range g.cl.Peers() {
		if m.Name == g.node || m.State != "alive" {
			continue
		}
		asked++
		go func(node string) {
			if !probe(ctx, node) {
				node = ""
			}
			select {
			case found <- node:
			case <-ctx.Done():
			}
		}(m.Name)
	}
	for ; asked > 0; asked-- {
		select {
		case node := <-found:
			if node != "" {
				return node
			}
		case <-ctx.Done():
			return ""
		}
	}
	return ""
}
