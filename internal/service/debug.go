package service

import (
	"context"
	"fmt"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/identity"
	"github.com/sandpit-dev/sandpit/internal/router"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// State is a read-only snapshot of everything the daemon believes: the
// store's rows, the router's table, the TCP listeners actually bound and the
// engine's containers. Tests compare the four to prove they agree; an
// operator reads it to see why they do not.
type State struct {
	Sandboxes  []sandpit.Sandbox
	Ports      []sandpit.ExposedPort
	Domains    []sandpit.CustomDomain
	Routes     []router.Route
	Listeners  []int // host ports with a bound TCP listener
	Containers []driver.Container
	// PoolSlots are the warm pool's slots, free and adopted.
	PoolSlots []store.PoolSlot
}

// listenerLister is what a router that binds host ports can say about them.
type listenerLister interface{ Listeners() []int }

// DebugState reads the snapshot. The pieces are read one after the other,
// so it is only consistent while no operation runs. It shows every owner's
// sandboxes, so only the admin may read it.
func (s *Service) DebugState(ctx context.Context) (State, error) {
	var st State
	if !identity.Of(ctx).Admin {
		return st, fmt.Errorf("%w: the debug state is for the admin token", sandpit.ErrForbidden)
	}
	var err error
	if st.Sandboxes, err = s.allSandboxes(ctx, nil); err != nil {
		return st, err
	}
	if st.Ports, err = s.store.ListAllPorts(ctx); err != nil {
		return st, err
	}
	if st.Domains, err = s.store.ListAllCustomDomains(ctx); err != nil {
		return st, err
	}
	if s.router != nil {
		if st.Routes, err = s.router.Routes(ctx); err != nil {
			return st, err
		}
		if l, ok := s.router.(listenerLister); ok {
			st.Listeners = l.Listeners()
		}
	}
	// The slots are read before the containers: a refill that starts in
	// between then shows a container without a slot for a moment (the
	// checker retries), never a slot whose container was already listed as
	// a stray.
	if st.PoolSlots, err = s.store.ListPoolSlots(ctx); err != nil {
		return st, err
	}
	if st.Containers, err = s.rt.List(ctx, s.ownLabels()); err != nil {
		return st, runtimeErr("list containers", err)
	}
	return st, nil
}
