// This file holds on-demand TLS: the automation policy and ask endpoint set up
// in Caddy, the handler answering Caddy's ask, and the check that a hostname
// is not already the operator's.

package caddy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
)

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
