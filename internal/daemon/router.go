package daemon

import (
	"log/slog"
	"net"

	"github.com/sandpit-dev/sandpit/internal/router/builtin"
)

// newRouter builds the builtin router. TCP exposures listen on the same
// interface as the HTTP proxy, so one flag decides what is reachable from
// outside the host.
func newRouter(cfg Config, log *slog.Logger) *builtin.Builtin {
	host, _, err := net.SplitHostPort(cfg.ProxyListen)
	if err != nil || host == "" {
		host = "0.0.0.0"
	}
	return builtin.New(builtin.Options{Domain: cfg.Domain, TCPBindHost: host, Logger: log})
}
