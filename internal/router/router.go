// Package router is the seam between the service and whatever carries traffic
// to sandboxes: router/builtin (an in-process proxy, the default) and, later,
// router/caddy (routes installed through the Caddy admin API).
package router

import (
	"context"
	"errors"
	"strconv"
)

// ErrNotInstalled is returned when removing or resolving a route that is not
// installed.
var ErrNotInstalled = errors.New("route not installed")

// Kind names the three route families.
type Kind string

const (
	KindHTTP   Kind = "http"   // Host <sandbox-id>-<port>.<domain>
	KindTCP    Kind = "tcp"    // a listener on a host port
	KindDomain Kind = "domain" // Host <custom hostname>
)

// Route is one installed route. Upstream is "ip:port" inside the sandbox.
type Route struct {
	Kind      Kind
	SandboxID string
	Port      int    // the sandbox-side port
	HostPort  int    // KindTCP only
	Hostname  string // KindDomain only
	Upstream  string
}

// Key identifies a route for installation and removal. Installing a route with
// an existing key replaces its upstream, so a reinstall is idempotent.
func (r Route) Key() string {
	switch r.Kind {
	case KindTCP:
		return "tcp:" + itoa(r.HostPort)
	case KindDomain:
		return "domain:" + r.Hostname
	default:
		return "http:" + r.SandboxID + ":" + itoa(r.Port)
	}
}

// Router installs and removes routes. Every method must be idempotent: the
// service reinstalls every route at start and on retries.
type Router interface {
	Install(ctx context.Context, r Route) error
	// Remove deletes the route with r's key; a missing route is not an error.
	Remove(ctx context.Context, r Route) error
	Routes(ctx context.Context) ([]Route, error)
}

func itoa(n int) string { return strconv.Itoa(n) }
