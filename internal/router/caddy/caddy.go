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
	"regexp"
	"sort"
	"strconv"
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

// ---- @ids and objects ----

func (c *Caddy) prefix() string { return c.opts.Server + "_" }

func (c *Caddy) fallbackID() string  { return c.prefix() + "fallback" }
func (c *Caddy) tlsPolicyID() string { return c.prefix() + "tls" }

// objectID is the @id of a route's object in Caddy. It carries the sandbox so
// that listing sandpit's routes back from Caddy tells whose they are.
func (c *Caddy) objectID(r router.Route) string {
	switch r.Kind {
	case router.KindTCP:
		return c.prefix() + "tcp_" + strconv.Itoa(r.HostPort) + "_" + r.SandboxID + "_" + strconv.Itoa(r.Port)
	case router.KindDomain:
		return c.prefix() + "domain_" + r.SandboxID + "_" + r.Hostname
	case router.KindAnyPort:
		return c.prefix() + "anyport_" + r.SandboxID
	default:
		return c.prefix() + "http_" + r.SandboxID + "_" + strconv.Itoa(r.Port)
	}
}

// tcpServerName is the key of a TCP forward in apps.layer4.servers: one
// server per host port, since a host port is one listener.
func (c *Caddy) tcpServerName(hostPort int) string {
	return c.prefix() + "tcp_" + strconv.Itoa(hostPort)
}

// parseID turns an @id sandpit wrote back into the route it names (without
// the upstream); ok is false for ids sandpit does not own.
func (c *Caddy) parseID(id string) (router.Route, bool) {
	rest, ok := strings.CutPrefix(id, c.prefix())
	if !ok {
		return router.Route{}, false
	}
	kind, rest, _ := strings.Cut(rest, "_")
	parts := strings.SplitN(rest, "_", 3)
	switch kind {
	case "http":
		if len(parts) != 2 {
			return router.Route{}, false
		}
		p, err := strconv.Atoi(parts[1])
		return router.Route{Kind: router.KindHTTP, SandboxID: parts[0], Port: p}, err == nil
	case "domain":
		if len(parts) != 2 {
			return router.Route{}, false
		}
		return router.Route{Kind: router.KindDomain, SandboxID: parts[0], Hostname: parts[1]}, true
	case "anyport":
		if len(parts) != 1 || parts[0] == "" {
			return router.Route{}, false
		}
		return router.Route{Kind: router.KindAnyPort, SandboxID: parts[0]}, true
	case "tcp":
		if len(parts) != 3 {
			return router.Route{}, false
		}
		hp, err1 := strconv.Atoi(parts[0])
		p, err2 := strconv.Atoi(parts[2])
		return router.Route{Kind: router.KindTCP, HostPort: hp, SandboxID: parts[1], Port: p}, err1 == nil && err2 == nil
	}
	return router.Route{}, false
}

// hosts are the Host values an HTTP route answers.
func (c *Caddy) hosts(r router.Route) []string {
	if r.Kind == router.KindDomain {
		return []string{r.Hostname}
	}
	p := strconv.Itoa(r.Port)
	return []string{r.SandboxID + "-" + p + "." + c.opts.Domain, p + "-" + r.SandboxID + "." + c.opts.Domain}
}

// anyPortCapture names the regexp capture that holds the port of an
// any-port route's host.
const anyPortCapture = "sandpit_port"

// anyPortMatch matches both preview host forms of every port of one
// sandbox, capturing the port: Caddy's host matcher has no patterns, so the
// match is a regexp over the request's host.
func (c *Caddy) anyPortMatch(id string) []any {
	q := regexp.QuoteMeta(id)
	d := regexp.QuoteMeta(c.opts.Domain)
	port := `([1-9][0-9]{0,4})`
	form := func(pattern string) any {
		return map[string]any{"vars_regexp": map[string]any{"{http.request.host}": map[string]any{"name": anyPortCapture, "pattern": pattern}}}
	}
	return []any{form(`^` + port + `-` + q + `\.` + d + `$`), form(`^` + q + `-` + port + `\.` + d + `$`)}
}

// httpRoute is the route object of a preview host, a custom domain or the
// every-port route of an E2B sandbox. A route with a token proxies only
// requests that present it (in the route's header, which is then dropped)
// and answers the others 403, as the builtin proxy does.
func (c *Caddy) httpRoute(r router.Route) map[string]any {
	match := []any{map[string]any{"host": c.hosts(r)}}
	dial := r.Upstream
	if r.Kind == router.KindAnyPort {
		match = c.anyPortMatch(r.SandboxID)
		if host, _, err := net.SplitHostPort(r.Upstream); err == nil {
			dial = net.JoinHostPort(host, "{http.regexp."+anyPortCapture+".1}")
		}
	}
	proxy := map[string]any{
		"handler":   "reverse_proxy",
		"upstreams": []any{map[string]any{"dial": dial}},
		// Stream responses (command output, server-sent events) as
		// they come, as the builtin proxy does.
		"flush_interval": -1,
		// Credentials meant for the proxy or the daemon never reach the
		// sandbox, as with the builtin proxy (router.StripForPreview):
		// the traffic and preview tokens, every Sandpit-* header, the
		// daemon's tokens in Authorization or X-Api-Key, and cookies of
		// the reserved sandpit prefix. Caddy cannot ask the daemon which
		// tokens are its own, so a value of the daemon's token shapes
		// (sp_..., spt_...) is emptied; the application's own
		// credentials and cookies pass. The two credential headers are
		// deleted by the matching routes stripDaemonCredentials puts
		// before the proxy.
		"headers": map[string]any{"request": map[string]any{
			"delete": []any{router.TrafficTokenHeader, router.PreviewTokenHeader, router.InternalHeaderPrefix + "*"},
			"replace": map[string]any{
				"Cookie": []any{map[string]any{"search_regexp": `(?i)(^|;)\s*` + router.ReservedCookiePrefix + `[^=;]*=[^;]*`, "replace": ""}},
			},
		}},
	}
	if r.Host != "" {
		// The sandbox's host mask (E2B's maskRequestHost), with the port
		// the request named put in on the every-port route.
		host := r.Host
		if r.Kind == router.KindAnyPort {
			host = strings.ReplaceAll(host, router.PortPlaceholder, "{http.regexp."+anyPortCapture+".1}")
		}
		proxy["headers"].(map[string]any)["request"].(map[string]any)["set"] = map[string]any{"Host": []any{host}}
	}
	handle := []any{proxy}
	if r.TrafficToken != "" {
		handle = []any{map[string]any{
			"handler": "subroute",
			"routes": []any{
				map[string]any{
					"match":  []any{map[string]any{"header": map[string]any{r.Header(): []any{r.TrafficToken}}}},
					"handle": []any{proxy},
				},
				map[string]any{"handle": []any{map[string]any{
					"handler":     "static_response",
					"status_code": http.StatusForbidden,
					"body":        "sandpit: this port needs its token in the " + r.Header() + " header\n",
				}}},
			},
		}}
	}
	// The deletions run first, as middleware of one subroute, whatever
	// the token checks then decide.
	routes := stripDaemonCredentials()
	if r.Kind == router.KindAnyPort && r.AccessToken != "" {
		// Running code on the interpreter's port takes the sandbox's
		// access token, as through the gateway (router.NeedsAccessToken).
		routes = append(routes, map[string]any{
			"match": []any{map[string]any{
				"vars": map[string]any{"{http.regexp." + anyPortCapture + ".1}": []any{strconv.Itoa(router.InterpreterPort)}},
				"path": []any{router.InterpreterExecutePath, router.InterpreterExecutePath + "/"},
				"not":  []any{map[string]any{"header": map[string]any{router.AccessTokenHeader: []any{r.AccessToken}}}},
			}},
			"handle": []any{map[string]any{
				"handler":     "static_response",
				"status_code": http.StatusUnauthorized,
				"body":        "sandpit: running code needs the sandbox's access token in the " + router.AccessTokenHeader + " header\n",
			}},
			"terminal": true,
		})
	}
	routes = append(routes, map[string]any{"handle": handle})
	return map[string]any{
		"@id":      c.objectID(r),
		"match":    match,
		"handle":   []any{map[string]any{"handler": "subroute", "routes": routes}},
		"terminal": true,
	}
}

// stripDaemonCredentials are the routes that delete Authorization and
// X-Api-Key when they carry a value of the daemon's token shapes (sp_...
// for the admin token, spt_... for personal tokens), so that the header
// does not reach the sandbox at all; an application's own credentials
// pass.
func stripDaemonCredentials() []any {
	del := func(header, pattern string) any {
		return map[string]any{
			"match":  []any{map[string]any{"header_regexp": map[string]any{header: map[string]any{"pattern": pattern}}}},
			"handle": []any{map[string]any{"handler": "headers", "request": map[string]any{"delete": []any{header}}}},
		}
	}
	return []any{
		del("Authorization", `(?i)^\s*(bearer\s+)?spt?_\S+\s*$`),
		del("X-Api-Key", `^\s*spt?_\S+\s*$`),
	}
}

// tcpServer is the layer4 server of a TCP forward.
func (c *Caddy) tcpServer(r router.Route) map[string]any {
	return map[string]any{
		"@id":    c.objectID(r),
		"listen": []any{net.JoinHostPort(c.opts.TCPBindHost, strconv.Itoa(r.HostPort))},
		"routes": []any{map[string]any{
			"handle": []any{map[string]any{
				"handler":   "proxy",
				"upstreams": []any{map[string]any{"dial": []any{r.Upstream}}},
			}},
		}},
	}
}

// fallback answers hosts no route matches with 404, as the builtin proxy
// does, or proxies them to Options.Fallback; it stays the server's last
// route because routes are inserted at 0.
func (c *Caddy) fallback() map[string]any {
	if c.opts.Fallback != "" {
		return map[string]any{
			"@id": c.fallbackID(),
			"handle": []any{map[string]any{
				"handler":   "reverse_proxy",
				"upstreams": []any{map[string]any{"dial": c.opts.Fallback}},
				// Streams and server-sent events pass as they come.
				"flush_interval": -1,
			}},
		}
	}
	return map[string]any{
		"@id": c.fallbackID(),
		"handle": []any{map[string]any{
			"handler":     "static_response",
			"status_code": http.StatusNotFound,
			"body":        "sandpit: no route for host {http.request.host}\n",
		}},
	}
}

func (c *Caddy) server() map[string]any {
	s := map[string]any{
		"listen": []any{c.opts.Listen},
		// Sandpit decides what is served and how: no redirect servers on
		// :80 and no certificates for every Host matcher up front. With
		// TLS, certificates come on demand, guarded by the ask endpoint.
		"automatic_https": map[string]any{"disable": true},
		"routes":          []any{c.fallback()},
		// Plain HTTP/1.1 without TLS; HTTP/3 would add a UDP listener
		// nobody asked for.
		"protocols": []any{"h1"},
	}
	if c.opts.TLS {
		s["tls_connection_policies"] = []any{map[string]any{}}
		s["protocols"] = []any{"h1", "h2"}
	}
	return s
}

func (c *Caddy) serverPath() string { return "/config/apps/http/servers/" + c.opts.Server }

// ---- setting up and reconciling ----

// ensureBase creates what sandpit's routes live in when it is missing:
// sandpit's HTTP server with its fallback route, the layer4 app when Caddy
// has it, and the TLS automation policy with the ask endpoint. It never
// replaces what exists, so an operator's config around it is kept. Called
// with mu held.
func (c *Caddy) ensureBase(ctx context.Context) error {
	var root any
	if err := c.api.do(ctx, http.MethodGet, "/config/", nil, &root); err != nil {
		return err
	}
	srv, _, ok := lookup(root, "apps", "http", "servers", c.opts.Server)
	switch {
	case !ok:
		if err := c.api.setPath(ctx, root, c.server(), "apps", "http", "servers", c.opts.Server); err != nil {
			return fmt.Errorf("create caddy server %q: %w", c.opts.Server, err)
		}
	default:
		m, _ := srv.(map[string]any)
		if !sameJSON(m["listen"], []any{c.opts.Listen}) {
			// PATCH replaces the list; POST would append to it, and an
			// array appended to an array is not a listen address.
			if err := c.api.do(ctx, http.MethodPatch, c.serverPath()+"/listen", []any{c.opts.Listen}, nil); err != nil {
				return err
			}
		}
		if have, found, err := c.api.get(ctx, "/id/"+c.fallbackID()); err != nil {
			return err
		} else if !found {
			if err := c.api.do(ctx, http.MethodPost, c.serverPath()+"/routes", c.fallback(), nil); err != nil {
				return err
			}
		} else if !sameJSON(have, c.fallback()) {
			// Written by a run with another fallback (a daemon that
			// joined a cluster since, say): this run's replaces it.
			if err := c.api.do(ctx, http.MethodPatch, "/id/"+c.fallbackID(), c.fallback(), nil); err != nil {
				return err
			}
		}
	}
	if err := c.ensureLayer4(ctx, root); err != nil {
		return err
	}
	if c.opts.TLS {
		if err := c.ensureTLS(ctx); err != nil {
			return err
		}
	}
	return nil
}

// ensureLayer4 detects the layer4 app: a Caddy without the module refuses to
// load an (empty) layer4 app, and the refusal names the unknown module.
// Detection happens once; afterwards the app is recreated if Caddy lost it.
func (c *Caddy) ensureLayer4(ctx context.Context, root any) error {
	if c.tcpMode == TCPSandpit {
		return nil
	}
	if _, _, ok := lookup(root, "apps", "layer4"); ok {
		c.tcpMode = TCPLayer4
		return nil
	}
	// Re-read: ensureBase may have just created "apps".
	var now any
	if err := c.api.do(ctx, http.MethodGet, "/config/", nil, &now); err != nil {
		return err
	}
	err := c.api.setPath(ctx, now, map[string]any{"servers": map[string]any{}}, "apps", "layer4")
	switch {
	case err == nil:
		c.tcpMode = TCPLayer4
	case c.tcpMode == "" && strings.Contains(err.Error(), "layer4") && strings.Contains(err.Error(), "module"):
		c.tcpMode = TCPSandpit
	default:
		return fmt.Errorf("create caddy layer4 app: %w", err)
	}
	return nil
}

// ensureTLS appends sandpit's on-demand automation policy and points
// on-demand permission at sandpit's ask endpoint: the "permission" module of
// newer Caddy, else the "ask" URL older Caddy (2.6, Debian's) knows.
func (c *Caddy) ensureTLS(ctx context.Context) error {
	var root any
	if err := c.api.do(ctx, http.MethodGet, "/config/", nil, &root); err != nil {
		return err
	}
	policy := map[string]any{"@id": c.tlsPolicyID(), "on_demand": true}
	if c.opts.InternalCA {
		policy["issuers"] = []any{map[string]any{"module": "internal"}}
		// Never touch the machine's trust store from a daemon.
		if _, _, ok := lookup(root, "apps", "pki"); !ok {
			if err := c.api.setPath(ctx, root, map[string]any{"install_trust": false}, "apps", "pki", "certificate_authorities", "local"); err != nil {
				return fmt.Errorf("caddy pki: %w", err)
			}
			if err := c.api.do(ctx, http.MethodGet, "/config/", nil, &root); err != nil {
				return err
			}
		}
	}
	if have, found, err := c.api.get(ctx, "/id/"+c.tlsPolicyID()); err != nil {
		return err
	} else if !found {
		if _, _, ok := lookup(root, "apps", "tls", "automation", "policies"); ok {
			err = c.api.do(ctx, http.MethodPost, "/config/apps/tls/automation/policies", policy, nil)
		} else {
			err = c.api.setPath(ctx, root, []any{policy}, "apps", "tls", "automation", "policies")
		}
		if err != nil {
			return fmt.Errorf("caddy tls policy: %w", err)
		}
	} else if !sameJSON(have, policy) {
		if err := c.api.do(ctx, http.MethodPatch, "/id/"+c.tlsPolicyID(), policy, nil); err != nil {
			return fmt.Errorf("caddy tls policy: %w", err)
		}
	}
	var od map[string]any
	if err := c.api.do(ctx, http.MethodGet, "/config/apps/tls/automation/on_demand", nil, &od); err != nil && !errors.Is(err, errMissing) {
		return err
	}
	if perm, _ := od["permission"].(map[string]any); perm["endpoint"] == c.opts.AskURL || od["ask"] == c.opts.AskURL {
		return nil
	}
	form := "permission"
	err := c.api.do(ctx, http.MethodPost, "/config/apps/tls/automation/on_demand",
		map[string]any{"permission": map[string]any{"module": "http", "endpoint": c.opts.AskURL}}, nil)
	if err != nil && errors.Is(err, ErrAdmin) && strings.Contains(err.Error(), "permission") {
		form = "ask"
		err = c.api.do(ctx, http.MethodPost, "/config/apps/tls/automation/on_demand", map[string]any{"ask": c.opts.AskURL}, nil)
	}
	if err != nil {
		return fmt.Errorf("caddy on-demand ask: %w", err)
	}
	c.log.Info("caddy on-demand TLS asks sandpit before issuing", "form", form, "url", c.opts.AskURL)
	return nil
}

// Sync makes sandpit's objects in Caddy equal to the store's routes: it
// removes the ones the store does not know and installs the missing or
// changed ones. Objects without sandpit's prefix are never touched.
func (c *Caddy) Sync(ctx context.Context) error {
	if c.opts.Desired == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Every step reads before it writes, so a whole sync can be run again.
	return c.retry(ctx, func() error { return c.sync(ctx) })
}

func (c *Caddy) sync(ctx context.Context) error {
	if err := c.ensureBase(ctx); err != nil {
		return err
	}
	// The desired set is read under mu, so no install runs between reading
	// it and pruning against it: a route installed concurrently either is in
	// the set or waits for this sync to finish.
	desired, err := c.opts.Desired(ctx)
	if err != nil {
		return fmt.Errorf("desired routes: %w", err)
	}
	want := map[string]router.Route{}
	for _, r := range desired {
		if r.Kind == router.KindTCP && c.tcpMode != TCPLayer4 {
			continue
		}
		want[c.objectID(r)] = r
	}
	have, err := c.owned(ctx)
	if err != nil {
		return err
	}
	misplaced, err := c.misplaced(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for id, r := range have {
		if misplaced[id] {
			// Put back where it belongs by the install below (written by
			// an older sandpit, which put every route first).
			c.log.Info("caddy reconcile: moving a route behind the operator's routes", "id", id)
			if err := c.remove(ctx, r); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if _, ok := want[id]; !ok {
			c.log.Info("caddy reconcile: removing a route the store does not know", "id", id)
			if err := c.remove(ctx, r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, r := range want {
		if err := c.install(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// misplaced lists sandpit's routes that stand where insertAt would not put
// them: before one of the operator's routes, or (every-port routes) before
// one of sandpit's preview or domain routes.
func (c *Caddy) misplaced(ctx context.Context) (map[string]bool, error) {
	routes, _, err := c.api.get(ctx, c.serverPath()+"/routes")
	if err != nil {
		return nil, err
	}
	list, _ := routes.([]any)
	out := map[string]bool{}
	var owned, anyPorts []string
	for _, item := range list {
		m, _ := item.(map[string]any)
		id, _ := m["@id"].(string)
		if id == c.fallbackID() {
			break
		}
		r, ok := c.parseID(id)
		switch {
		case !ok:
			for _, o := range owned {
				out[o] = true
			}
			owned, anyPorts = owned[:0], anyPorts[:0]
		case r.Kind == router.KindAnyPort:
			owned = append(owned, id)
			anyPorts = append(anyPorts, id)
		default:
			owned = append(owned, id)
			for _, a := range anyPorts {
				out[a] = true
			}
			anyPorts = anyPorts[:0]
		}
	}
	return out, nil
}

// owned lists sandpit's objects in Caddy by @id, with their upstreams.
func (c *Caddy) owned(ctx context.Context) (map[string]router.Route, error) {
	out := map[string]router.Route{}
	routes, _, err := c.api.get(ctx, c.serverPath()+"/routes")
	if err != nil {
		return nil, err
	}
	list, _ := routes.([]any)
	for _, item := range list {
		m, _ := item.(map[string]any)
		id, _ := m["@id"].(string)
		r, ok := c.parseID(id)
		if !ok {
			continue
		}
		r.Upstream = firstDial(m)
		out[id] = r
	}
	if c.tcpMode == TCPLayer4 {
		servers, _, err := c.api.get(ctx, "/config/apps/layer4/servers")
		if err != nil {
			return nil, err
		}
		sm, _ := servers.(map[string]any)
		for _, item := range sm {
			m, _ := item.(map[string]any)
			id, _ := m["@id"].(string)
			r, ok := c.parseID(id)
			if !ok || r.Kind != router.KindTCP {
				continue
			}
			r.Upstream = firstDial(m)
			out[id] = r
		}
	}
	return out, nil
}

// firstDial digs the upstream address out of a route or layer4 server object.
func firstDial(obj map[string]any) string {
	var walk func(v any) string
	walk = func(v any) string {
		switch t := v.(type) {
		case map[string]any:
			if d, ok := t["dial"]; ok {
				switch dv := d.(type) {
				case string:
					return dv
				case []any:
					if len(dv) > 0 {
						s, _ := dv[0].(string)
						return s
					}
				}
			}
			for _, k := range []string{"handle", "routes", "upstreams"} {
				if s := walk(t[k]); s != "" {
					return s
				}
			}
		case []any:
			for _, e := range t {
				if s := walk(e); s != "" {
					return s
				}
			}
		}
		return ""
	}
	return walk(obj)
}

// Poll watches Caddy until ctx ends: when sandpit's server is gone (Caddy
// restarted with an empty or older config) or Caddy answers again after being
// unreachable, it reconciles.
func (c *Caddy) Poll(ctx context.Context) {
	t := time.NewTicker(c.opts.PollInterval)
	defer t.Stop()
	down := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var found bool
		err := c.retry(ctx, func() (err error) {
			_, found, err = c.api.get(ctx, "/id/"+c.fallbackID())
			return err
		})
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !down {
				c.log.Warn("caddy admin API unreachable; routes will be reconciled when it answers", "err", err)
			}
			down = true
			continue
		case found && !down:
			continue
		}
		c.log.Info("caddy came back without sandpit's config or after being down; reconciling", "was_down", down)
		if err := c.Sync(ctx); err != nil {
			c.log.Error("caddy reconcile", "err", err)
			// Try again on the next tick rather than trusting a half sync.
			down = true
			continue
		}
		down = false
	}
}

// ---- the Router interface ----

// Install adds or replaces a route. Reading the @id first makes a repeat a
// no-op: Caddy keeps no duplicate, and a retry costs one GET.
func (c *Caddy) Install(ctx context.Context, r router.Route) error {
	if _, _, err := net.SplitHostPort(r.Upstream); err != nil {
		return fmt.Errorf("route %s: bad upstream %q: %w", r.Key(), r.Upstream, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return errors.New("caddy router not started")
	}
	if r.Kind == router.KindTCP && c.tcpMode != TCPLayer4 {
		return c.tcp.Install(ctx, r)
	}
	return c.retry(ctx, func() error {
		err := c.install(ctx, r)
		if errors.Is(err, errMissing) {
			// The server or app the route lives in is gone: Caddy
			// restarted empty and the poll has not noticed yet. Recreate
			// and try once more.
			if err = c.ensureBase(ctx); err == nil {
				err = c.install(ctx, r)
			}
		}
		return err
	})
}

// retry runs op again when Caddy gave no answer, a few times over about a
// third of a second: Caddy restarts its admin endpoint after each config
// change, and a request arriving meanwhile is reset although Caddy is fine.
// Every op reads before it writes, so running it again after a write that
// did land finds it done rather than doing it twice. A Caddy that is really
// down still fails the call quickly.
func (c *Caddy) retry(ctx context.Context, op func() error) error {
	delay := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil || !errors.Is(err, errUnreachable) || attempt == 3 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay *= 2
	}
}

func (c *Caddy) install(ctx context.Context, r router.Route) error {
	if r.Kind == router.KindTCP {
		path := "/config/apps/layer4/servers/" + c.tcpServerName(r.HostPort)
		want := c.tcpServer(r)
		have, found, err := c.api.get(ctx, path)
		if err != nil {
			return err
		}
		if found && sameJSON(have, want) {
			return nil
		}
		return c.api.do(ctx, http.MethodPost, path, want, nil)
	}
	id := c.objectID(r)
	want := c.httpRoute(r)
	have, found, err := c.api.get(ctx, "/id/"+id)
	if err != nil {
		return err
	}
	switch {
	case found && sameJSON(have, want):
		return nil
	case found:
		return c.api.do(ctx, http.MethodPatch, "/id/"+id, want, nil)
	}
	at, err := c.insertAt(ctx, r.Kind == router.KindAnyPort)
	if err != nil {
		return err
	}
	return c.api.do(ctx, http.MethodPut, c.serverPath()+"/routes/"+strconv.Itoa(at), want, nil)
}

// insertAt is where a new route of sandpit's goes in its server's route
// list: after every route of the operator's that comes before sandpit's
// own, so a tenant's hostname can never shadow one of the operator's
// routes; preview and domain routes before the every-port routes (which
// match every port of a sandbox and must not take the ones with a route of
// their own, the agent's above all); and always before the fallback, which
// matches everything.
func (c *Caddy) insertAt(ctx context.Context, anyPort bool) (int, error) {
	routes, _, err := c.api.get(ctx, c.serverPath()+"/routes")
	if err != nil {
		return 0, err
	}
	list, _ := routes.([]any)
	firstOwned, firstAny, fallback := -1, -1, len(list)
	for i, item := range list {
		m, _ := item.(map[string]any)
		id, _ := m["@id"].(string)
		if id == c.fallbackID() {
			fallback = i
			break
		}
		r, ok := c.parseID(id)
		if !ok {
			// The operator's: sandpit's routes go after it.
			firstOwned, firstAny = -1, -1
			continue
		}
		if firstOwned < 0 {
			firstOwned = i
		}
		if r.Kind == router.KindAnyPort && firstAny < 0 {
			firstAny = i
		}
	}
	switch {
	case anyPort:
		return fallback, nil
	case firstAny >= 0:
		return firstAny, nil
	case firstOwned >= 0:
		return firstOwned, nil
	}
	return fallback, nil
}

// Remove deletes the route's object; a missing one is not an error.
func (c *Caddy) Remove(ctx context.Context, r router.Route) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Kind == router.KindTCP && c.tcpMode != TCPLayer4 {
		if c.tcp == nil {
			return nil
		}
		return c.tcp.Remove(ctx, r)
	}
	return c.retry(ctx, func() error { return c.remove(ctx, r) })
}

func (c *Caddy) remove(ctx context.Context, r router.Route) error {
	path := "/id/" + c.objectID(r)
	if r.Kind == router.KindTCP {
		path = "/config/apps/layer4/servers/" + c.tcpServerName(r.HostPort)
	}
	if err := c.api.do(ctx, http.MethodDelete, path, nil, nil); err != nil && !errors.Is(err, errMissing) {
		return err
	}
	return nil
}

// Routes lists sandpit's routes as Caddy holds them, plus the TCP forwards
// sandpit serves itself.
func (c *Caddy) Routes(ctx context.Context) ([]router.Route, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var have map[string]router.Route
	err := c.retry(ctx, func() (err error) {
		have, err = c.owned(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]router.Route, 0, len(have))
	for _, r := range have {
		out = append(out, r)
	}
	if c.tcp != nil {
		local, err := c.tcp.Routes(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, local...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out, nil
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

// AskHandler answers Caddy's on-demand TLS question "may I get a certificate
// for ?domain=": 200 when bound says the hostname is routed right now, 403
// otherwise, so a stranger's hostname pointed at this Caddy gets none.
func AskHandler(bound func(ctx context.Context, host string) (bool, error), log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.URL.Query().Get("domain")
		if host == "" {
			http.Error(w, "missing domain", http.StatusBadRequest)
			return
		}
		ok, err := bound(r.Context(), host)
		if err != nil {
			log.Error("caddy ask", "domain", host, "err", err)
			http.Error(w, "lookup failed", http.StatusInternalServerError)
			return
		}
		if !ok {
			http.Error(w, "not bound", http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

// HostTaken reports whether one of the operator's own routes, in any HTTP
// server of this Caddy, matches host by name: such a hostname is the
// operator's, and a sandbox may not bind it (even placed after the
// operator's route, a tenant's route would take the name's certificate
// questions and any listener the operator's route is not on).
func (c *Caddy) HostTaken(ctx context.Context, host string) (bool, error) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	var servers any
	err := c.retry(ctx, func() (err error) {
		servers, _, err = c.api.get(ctx, "/config/apps/http/servers")
		return err
	})
	if err != nil {
		return false, err
	}
	sm, _ := servers.(map[string]any)
	for _, srv := range sm {
		m, _ := srv.(map[string]any)
		if c.routesMatchHost(m["routes"], host) {
			return true, nil
		}
	}
	return false, nil
}

// routesMatchHost walks a route list (and the subroutes in it) for a route
// not sandpit's whose host matcher names host.
func (c *Caddy) routesMatchHost(routes any, host string) bool {
	list, _ := routes.([]any)
	for _, item := range list {
		m, _ := item.(map[string]any)
		id, _ := m["@id"].(string)
		if _, ours := c.parseID(id); ours || id == c.fallbackID() {
			continue
		}
		sets, _ := m["match"].([]any)
		for _, set := range sets {
			sm, _ := set.(map[string]any)
			hosts, _ := sm["host"].([]any)
			for _, h := range hosts {
				if hostMatches(fmt.Sprint(h), host) {
					return true
				}
			}
		}
		handles, _ := m["handle"].([]any)
		for _, h := range handles {
			hm, _ := h.(map[string]any)
			if hm["handler"] == "subroute" && c.routesMatchHost(hm["routes"], host) {
				return true
			}
		}
	}
	return false
}

// hostMatches reads a Caddy host matcher entry: a name, or a name with
// wildcard labels ("*.example.com").
func hostMatches(pattern, host string) bool {
	pattern = strings.TrimSuffix(strings.ToLower(pattern), ".")
	if pattern == host {
		return true
	}
	pl, hl := strings.Split(pattern, "."), strings.Split(host, ".")
	if len(pl) != len(hl) || !strings.Contains(pattern, "*") {
		return false
	}
	for i := range pl {
		if pl[i] != "*" && pl[i] != hl[i] {
			return false
		}
	}
	return true
}
