// Package router is the seam between the service and whatever carries traffic
// to sandboxes: router/builtin (an in-process proxy, the default) and
// router/caddy (routes installed through the Caddy admin API).
package router

import (
	"context"
	"errors"
	"strconv"

	"github.com/sandpit-dev/sandpit"
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
	// KindAnyPort routes <port>-<sandbox-id>.<domain> for every port of a
	// sandbox that has no KindHTTP route of its own, as E2B serves its
	// sandboxes; Upstream names the sandbox's address with port 0.
	KindAnyPort Kind = "any-port"
)

// The header names and the interpreter's route are the domain's (see the
// root package); the routers name them through these for their own use.
const (
	TrafficTokenHeader     = sandpit.TrafficTokenHeader
	PreviewTokenHeader     = sandpit.PreviewTokenHeader
	AccessTokenHeader      = sandpit.AccessTokenHeader
	InterpreterPort        = sandpit.InterpreterPort
	InterpreterExecutePath = sandpit.InterpreterExecutePath
)

// NeedsAccessToken reports whether a request for p on a sandbox's port
// must carry the sandbox's access token (sandpit.NeedsAccessToken).
func NeedsAccessToken(port int, p string) bool { return sandpit.NeedsAccessToken(port, p) }

// PortPlaceholder stands for the port in a KindAnyPort route's Host (E2B's
// maskRequestHost syntax); the router puts in the port each request names.
const PortPlaceholder = "${PORT}"

// Route is one installed route. Upstream is "ip:port" inside the sandbox.
type Route struct {
	Kind      Kind
	SandboxID string
	Port      int    // the sandbox-side port
	HostPort  int    // KindTCP only
	Hostname  string // KindDomain only
	Upstream  string
	// TrafficToken, when set, must be presented in the TokenHeader header
	// (TrafficTokenHeader when that is empty): on a KindAnyPort route the
	// E2B traffic token, on a KindHTTP route a private port's preview token.
	// Empty means the route is public.
	TrafficToken string
	TokenHeader  string
	// Host, when set, is the Host header requests reach the sandbox's
	// server with (E2B's maskRequestHost, the port put in); empty keeps
	// the host the client asked for.
	Host string
	// AccessToken, on a KindAnyPort route, is the sandbox's access token,
	// which requests NeedsAccessToken names must present in
	// AccessTokenHeader; empty means the sandbox has none.
	AccessToken string
}

// Header is the header a route's TrafficToken is presented in.
func (r Route) Header() string {
	if r.TokenHeader != "" {
		return r.TokenHeader
	}
	return TrafficTokenHeader
}

// Key identifies a route for installation and removal. Installing a route with
// an existing key replaces its upstream, so a reinstall is idempotent.
func (r Route) Key() string {
	switch r.Kind {
	case KindTCP:
		return "tcp:" + itoa(r.HostPort)
	case KindDomain:
		return "domain:" + r.Hostname
	case KindAnyPort:
		return "any-port:" + r.SandboxID
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
