package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// HeaderSignedProbe asks a node, on the cluster port only, whether one of its
// sandboxes signed a file URL (E2B's /files?...&signature=...): it answers
// 204 if so and 404 if not, and does nothing else.
const HeaderSignedProbe = "Sandpit-Signed-Probe"

// probeTimeout bounds the wait for one node's answer to a probe.
const probeTimeout = 3 * time.Second

// signedFilesOwner finds the node whose sandbox signed the file URL of r,
// which names no sandbox: the E2B SDK's downloadUrl and uploadUrl put only
// the signature, made with the sandbox's access token, in the URL. This node
// is asked first (in process), then every other live node over the cluster
// port, all at once; "" means no node claims it, and the request is served
// here (its answer says so).
func (c *Cluster) signedFilesOwner(r *http.Request, local http.Handler, client *http.Client) string {
	probe := func(ctx context.Context, node string) bool {
		req, err := http.NewRequestWithContext(ctx, r.Method, r.URL.String(), http.NoBody)
		if err != nil {
			return false
		}
		req.Header.Set(HeaderSignedProbe, "1")
		req.Header.Set(HeaderForwardedBy, c.cfg.NodeName)
		req.Header.Set(HeaderPrincipal, anonymousPrincipal)
		if node == c.cfg.NodeName {
			req = req.WithContext(context.WithValue(ctx, forwardedKey{}, sandpit.Principal{}))
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
	if probe(r.Context(), c.cfg.NodeName) {
		return c.cfg.NodeName
	}
	ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
	defer cancel()
	found := make(chan string)
	asked := 0
	for _, m := range c.gossip.Members() {
		if m.Name == c.cfg.NodeName || m.State != "alive" {
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
