// This file holds the config document sandpit writes: the @ids it derives from
// routes and parses back, and the JSON objects (HTTP routes, layer4 servers,
// the fallback route, the server) it writes under them.

package caddy

import (
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/router"
)

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
