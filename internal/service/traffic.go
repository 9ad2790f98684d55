package service

import (
	"context"
	"errors"

	"github.com/sandpit-dev/sandpit"
)

// TrafficState is what a request for one of a sandbox's ports meets, from
// the sandbox's state alone: the routes the router holds follow it (they are
// installed when the sandbox starts or resumes and go when it pauses, stops
// or dies), and a request that finds no route is answered by it too.
type TrafficState int

const (
	// TrafficServed: the sandbox runs; its routes serve the request.
	TrafficServed TrafficState = iota + 1
	// TrafficGone: there is no such sandbox (never was, or deleted).
	TrafficGone
	// TrafficNotRunning: the sandbox exists but does not run (paused
	// without auto-resume, stopped, starting, being deleted, failed).
	TrafficNotRunning
)

// TrafficFor decides what a request for sandbox id's ports meets, waking a
// paused sandbox made with auto-resume first (WakeOnTraffic) and checking
// one that reconcile has not reached yet (which installs its routes). It is asked
// for a request the router found no route for, so a sandbox that is not
// running is told from a port nothing serves. A made-up id is answered
// from memory, without a query on the store's one connection: the request
// carries no credential.
func (s *Service) TrafficFor(ctx context.Context, id string) (TrafficState, sandpit.State, error) {
	if !s.store.SandboxKnown(id) {
		return TrafficGone, "", nil
	}
	if _, err := s.WakeOnTraffic(ctx, id); err != nil {
		if errors.Is(err, sandpit.ErrNotFound) {
			return TrafficGone, "", nil
		}
		return 0, "", err
	}
	// After a daemon restart a sandbox's routes come back when reconcile
	// has checked it; one asked for before then is checked now, as the
	// API's reads of one sandbox do, so its traffic finds its routes.
	if err := s.ensureChecked(ctx, id); err != nil {
		return 0, "", err
	}
	sb, err := s.store.GetSandbox(ctx, id)
	switch {
	case errors.Is(err, sandpit.ErrNotFound):
		return TrafficGone, "", nil
	case err != nil:
		return 0, "", err
	case sb.State != sandpit.StateRunning:
		return TrafficNotRunning, sb.State, nil
	}
	return TrafficServed, sb.State, nil
}
