package gateway

import (
	"context"
	"net/http"
	"net/http/httputil"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/cluster"
	"github.com/sandpit-dev/sandpit/internal/httpguard"
)

// PreviewConfig configures the forwarding of preview traffic.
type PreviewConfig struct {
	// Domain is the preview domain: hosts <label>.<Domain> are previews.
	Domain string
	// SandboxIDs returns the sandbox ids a preview host may name, most
	// likely first (a label can be read as an ordinary preview or as a
	// signed one).
	SandboxIDs func(p sandpit.PreviewHost) []string
}

// Preview wraps the node's preview proxy: a request for a sandbox that
// another node runs (by its preview host, either label form, or by a custom
// domain bound to it) goes to that node's proxy over the cluster port, one
// hop; everything else, and anything whose placement is not settled, is
// served here. The owner's proxy then does all the checks (signed URLs,
// traffic tokens, activity), exactly as for a request that reached it
// directly.
//
// The hop rides the cluster port rather than plain HTTP to the owner's public
// proxy: the channel is authenticated and encrypted, it needs no proxy port
// reachable between nodes, and it carries the client's address as a header
// the owner can trust.
func (g *Gateway) Preview(local http.Handler, cfg PreviewConfig) http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target, _ := pr.In.Context().Value(previewTargetKey{}).(string)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = target
			pr.Out.Host = pr.In.Host
			// Whatever the client sent under these names means nothing:
			// only this node says who forwarded and for whom.
			for _, h := range []string{cluster.HeaderForwardedBy, cluster.HeaderForwardedBy + "-To", cluster.HeaderPrincipal, cluster.HeaderPreview, cluster.HeaderClientAddr} {
				pr.Out.Header.Del(h)
			}
			pr.Out.Header.Set(cluster.HeaderForwardedBy, g.node)
			pr.Out.Header.Set(cluster.HeaderPrincipal, cluster.AnonymousPrincipal)
			pr.Out.Header.Set(cluster.HeaderPreview, "1")
			pr.Out.Header.Set(cluster.HeaderClientAddr, pr.In.RemoteAddr)
		},
		Transport: g.cl.Transport(),
		// Streams and server-sent events pass through as they come;
		// WebSocket upgrades are spliced by ReverseProxy itself.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			err = cluster.DownCause(r.Context(), err)
			g.log.Warn("cluster: preview forward failed", "host", r.Host, "err", err)
			http.Error(w, "sandpit: the node that runs this sandbox did not answer", http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The gateway is the first handler of a preview: it reads the
		// host, and the request carries the reading to the handlers of
		// this node's proxy behind it.
		p, ctx, fresh := sandpit.ResolvePreviewHost(r.Context(), r.Host, cfg.Domain)
		if fresh {
			r = r.WithContext(ctx)
		}
		target := g.previewOwner(r, p, cfg.SandboxIDs)
		if target == "" {
			local.ServeHTTP(w, r)
			return
		}
		// As the local proxy does: the exchange lasts as long as the
		// sandbox's server wants, and the request body keeps flowing after
		// the response starts.
		httpguard.LiftReadDeadline(w)
		_ = http.NewResponseController(w).EnableFullDuplex()
		ctx, done := g.cl.UntilDown(context.WithValue(r.Context(), previewTargetKey{}, target), target)
		defer done()
		proxy.ServeHTTP(w, r.WithContext(ctx))
	})
}

type previewTargetKey struct{}

// previewOwner is the node to forward a preview request to, or "" to serve
// it here: the sandbox is unknown, runs here, or its placement is not
// "placed" (reserved, or a state another part of the cluster gives it, which
// this node's proxy answers itself). A request that arrived forwarded is
// never forwarded again.
func (g *Gateway) previewOwner(r *http.Request, host sandpit.PreviewHost, ids func(sandpit.PreviewHost) []string) string {
	if _, forwarded := cluster.Forwarded(r.Context()); forwarded {
		return ""
	}
	p, found := g.idx.PlacementByHostname(host.Host)
	if !found {
		if host.Label == "" || ids == nil {
			return ""
		}
		for _, id := range ids(host) {
			if p, found = g.idx.Placement(id); found {
				break
			}
		}
	}
	if !found || p.State != cluster.PlacementPlaced || p.Node == "" || p.Node == g.node {
		return ""
	}
	return p.Node
}

// ForwardedSplit is the handler of the cluster port's forwarded requests:
// preview traffic goes to the node's preview proxy (preview), everything else
// to its API (api). ServeForwarded has already restored the client's address;
// the cluster's own headers are removed here before the sandbox could see
// them. The
// preview handler is this node's own proxy, never a gateway's Preview, so a
// preview is forwarded at most once.
func ForwardedSplit(api, preview http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(cluster.HeaderPreview) == "" || preview == nil {
			api.ServeHTTP(w, r)
			return
		}
		r = r.Clone(r.Context())
		for _, h := range []string{cluster.HeaderForwardedBy, cluster.HeaderPrincipal, cluster.HeaderPreview, cluster.HeaderClientAddr} {
			r.Header.Del(h)
		}
		preview.ServeHTTP(w, r)
	})
}
