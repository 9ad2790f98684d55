// This file implements the Router interface: installing, removing and listing
// one route at a time.

package caddy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/router"
)

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
