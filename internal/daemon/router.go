package daemon

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
	"github.com/sandpit-dev/sandpit/internal/router/caddy"
	"github.com/sandpit-dev/sandpit/internal/service"
)

// Routers --router accepts.
const (
	RouterBuiltin = "builtin"
	RouterCaddy   = "caddy"
)

// tcpBindHost is where TCP exposures listen: the same interface as the HTTP
// proxy, so one flag decides what is reachable from outside the host.
func tcpBindHost(cfg Config) string {
	host, _, err := net.SplitHostPort(cfg.ProxyListen)
	if err != nil || host == "" {
		host = "0.0.0.0"
	}
	return host
}

// newRouter builds the builtin router. adminToken is the daemon's admin
// token, which, like any personal token, the proxy never hands to a sandbox.
func newRouter(cfg Config, log *slog.Logger, adminToken string) *builtin.Builtin {
	return builtin.New(builtin.Options{Domain: cfg.Domain, TCPBindHost: tcpBindHost(cfg), Logger: log,
		DaemonCredential: func(v string) bool {
			return strings.HasPrefix(v, identity.TokenMarker) || adminToken != "" && subtle.ConstantTimeCompare([]byte(v), []byte(adminToken)) == 1
		},
		DaemonOnly: agentapi.DaemonOnlyPath,
	})
}

// edge is the router the daemon runs with and what it needs around it: the
// builtin router's proxy handler (served on the proxy listener), or the
// Caddy router's start, reconcile and poll.
type edge struct {
	router.Router
	proxy http.Handler // builtin only: served on --proxy-listen
	caddy *caddy.Caddy // caddy only
	close func() error
}

// proxyPortOf is the port of --proxy-listen, for URLs, when sandpit does not
// bind it itself (Caddy does).
func proxyPortOf(cfg Config) (int, error) {
	_, p, err := net.SplitHostPort(cfg.ProxyListen)
	if err != nil {
		return 0, fmt.Errorf("--proxy-listen %q: %w", cfg.ProxyListen, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("--proxy-listen %q: with --router caddy the port must be given (Caddy listens there)", cfg.ProxyListen)
	}
	return n, nil
}

// askURL is the on-demand TLS ask endpoint Caddy calls on sandpit's API
// listener: an unspecified listen host is reached on loopback.
func askURL(apiAddr string) string {
	host, port, _ := net.SplitHostPort(apiAddr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + askPath
}

const askPath = "/caddy/ask"

// newCaddyEdge builds the Caddy router. desired is the service's view of the
// routes (set once the service exists); fallback, when set, is the preview
// forwarder Caddy sends the hosts it has no route for.
func newCaddyEdge(cfg Config, apiAddr, fallback string, desired func(ctx context.Context) ([]router.Route, error), log *slog.Logger) (*edge, error) {
	c, err := caddy.New(caddy.Options{
		Fallback:    fallback,
		Admin:       cfg.CaddyAdmin,
		Listen:      cfg.ProxyListen,
		Domain:      cfg.Domain,
		TCPBindHost: tcpBindHost(cfg),
		TLS:         cfg.PreviewTLS,
		AskURL:      askURL(apiAddr),
		InternalCA:  cfg.CaddyInternalCA,
		Desired:     desired,
		Logger:      log,
	})
	if err != nil {
		return nil, err
	}
	return &edge{Router: c, caddy: c, close: c.Close}, nil
}

// askHandler serves Caddy's on-demand TLS question from the service.
func askHandler(svc *service.Service, log *slog.Logger) http.Handler {
	return caddy.AskHandler(svc.HostnameBound, log)
}
