// Package caddy is the router that installs sandpit's routes in a Caddy
// server through its admin API: preview hosts and custom domains as routes of
// an HTTP server sandpit owns, and TCP forwards as servers of the caddy-l4
// "layer4" app when that Caddy has it.
//
// Every object sandpit writes carries an @id derived from the route, under a
// prefix of its own, so an install can tell "already there" from "missing",
// a removal deletes exactly one object, and a reconcile touches only what
// sandpit owns: routes an operator added by hand, in sandpit's server or
// elsewhere, are never changed.
package caddy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
)

var _ router.Router = (*Caddy)(nil)

// Options configure the Caddy router.
type Options struct {
	// Admin is the base URL of Caddy's admin API.
	Admin string
	// Server names the HTTP server sandpit owns in apps.http.servers; it is
	// also the prefix of every @id sandpit writes. Default "sandpit".
	Server string
	// Listen is the address that server listens on (sandpit's proxy address).
	Listen string
	// Domain is the preview domain: <id>-<port>.<Domain> and <port>-<id>.<Domain>.
	Domain string
	// TCPBindHost is the address TCP forwards listen on, in Caddy's layer4
	// app or, without it, in sandpit itself.
	TCPBindHost string
	// TLS serves the HTTP server over HTTPS with on-demand certificates,
	// which Caddy asks AskURL about before issuing one.
	TLS    bool
	AskURL string
	// InternalCA issues those certificates from Caddy's internal CA (tests,
	// private deployments) instead of Caddy's default public issuers.
	InternalCA bool
	// Fallback, when set, is the address (host:port) of an HTTP server the
	// fallback route proxies hosts no route matches to, instead of
	// answering 404: in a cluster, the daemon's preview forwarder, which
	// sends a preview of another node's sandbox to that node.
	Fallback string
	// Desired lists the routes the store says must be installed now; a
	// reconcile makes sandpit's objects in Caddy equal to it.
	Desired func(ctx context.Context) ([]router.Route, error)
	// PollInterval is how often the router checks that Caddy still holds
	// sandpit's server (a restarted Caddy comes back empty). Default 1s.
	PollInterval time.Duration
	Logger       *slog.Logger
}

// TCPMode says who carries TCP forwards.
type TCPMode string

const (
	TCPLayer4  TCPMode = "caddy-layer4" // Caddy's layer4 app
	TCPSandpit TCPMode = "sandpit"      // sandpit's own listeners
)

// Caddy is the router. Config changes are serialized by mu: Caddy reloads its
// whole config on each change anyway, and one writer at a time makes "read,
// compare, write" of one @id free of races between sandpit's own calls.
type Caddy struct {
	opts Options
	log  *slog.Logger
	api  *admin

	mu      sync.Mutex
	tcpMode TCPMode
	tcp     *builtin.Builtin // TCP forwards when Caddy has no layer4 app
	started bool
}

// New builds the router; Start connects it to Caddy.
func New(opts Options) (*Caddy, error) {
	if opts.Server == "" {
		opts.Server = "sandpit"
	}
	if strings.ContainsAny(opts.Server, "_/ ") {
		return nil, fmt.Errorf("caddy server name %q: no '_', '/' or spaces", opts.Server)
	}
	if err := ValidAdminURL(opts.Admin); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(opts.Listen); err != nil {
		return nil, fmt.Errorf("caddy listen address %q: %w", opts.Listen, err)
	}
	if opts.TLS && opts.AskURL == "" {
		return nil, errors.New("caddy router: TLS needs an ask URL")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.TCPBindHost == "" {
		opts.TCPBindHost = "127.0.0.1"
	}
	return &Caddy{
		opts: opts,
		log:  opts.Logger,
		api: &admin{base: strings.TrimSuffix(opts.Admin, "/"), hc: &http.Client{
			Timeout:   15 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second},
		}},
	}, nil
}

// ValidAdminURL refuses an admin API address that is not an http(s) URL.
func ValidAdminURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid --caddy-admin %q: want an http:// URL", s)
	}
	return nil
}

// Start makes sure Caddy holds sandpit's server (and the TLS and layer4
// pieces it needs) and detects whether TCP forwards can go to Caddy. It fails
// when the admin API does not answer: sandpit cannot know where TCP forwards
// belong without asking.
func (c *Caddy) Start(ctx context.Context) (TCPMode, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.retry(ctx, func() error { return c.ensureBase(ctx) }); err != nil {
		return "", err
	}
	if c.tcpMode == TCPSandpit {
		c.tcp = builtin.New(builtin.Options{Domain: c.opts.Domain, TCPBindHost: c.opts.TCPBindHost, Logger: c.log})
	}
	c.started = true
	return c.tcpMode, nil
}

// Close stops the TCP forwards sandpit serves itself. Caddy's routes stay:
// they are Caddy's to serve while sandpit restarts, and the next start
// reconciles them.
func (c *Caddy) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tcp != nil {
		return c.tcp.Close()
	}
	return nil
}
