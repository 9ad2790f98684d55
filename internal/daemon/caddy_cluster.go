package daemon

import (
	"net"
	"net/http"
	"net/http/httputil"

	"github.com/sandpit-dev/sandpit/internal/cluster"
)

// In a cluster with --router caddy, each node's Caddy holds the routes of
// that node's sandboxes only. A preview host it has no route for goes to its
// fallback route, which proxies to this daemon's preview forwarder on
// loopback: the cluster's preview router, which sends the request over the
// cluster port to the node that runs the sandbox. That node hands it to its
// own Caddy, which has the route. So every node's Caddy answers for every
// sandbox, as every builtin proxy does.

// headerPreviewHop marks a preview an owner hands its own Caddy after
// another node forwarded it. If that Caddy has no route for it either (the
// sandbox went meanwhile), its fallback brings it back to the forwarder,
// which then answers 404 instead of forwarding it again. A client that sends
// the header itself only gives up the forwarding of its own request.
const headerPreviewHop = "Sandpit-Preview-Hop"

// caddyForwarder serves what Caddy's fallback route sends it.
func caddyForwarder(cl *cluster.Cluster, cfg Config) http.Handler {
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "sandpit: no route for host "+r.Host, http.StatusNotFound)
	})
	forward := clusterPreview(cl, cfg, notFound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(headerPreviewHop) != "" {
			notFound.ServeHTTP(w, r)
			return
		}
		forward.ServeHTTP(w, r)
	})
}

// caddyLocalPreview serves, on the owner, a preview another node forwarded:
// through this node's Caddy at caddyListen (on loopback when it listens on
// every interface), with the request's own Host.
func caddyLocalPreview(caddyListen string) http.Handler {
	host, port, err := net.SplitHostPort(caddyListen)
	if ip := net.ParseIP(host); err == nil && (host == "" || ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	target := net.JoinHostPort(host, port)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = target
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(headerPreviewHop, "1")
			pr.SetXForwarded()
		},
		// Streams pass as they come; WebSocket upgrades are spliced.
		FlushInterval: -1,
	}
}
