// This file sets up and reconciles: creating sandpit's server and the layer4
// app when missing, and Sync and Poll, which make sandpit's objects in Caddy
// equal to the store's routes.

package caddy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/router"
)

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
