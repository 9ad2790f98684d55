package service

import (
	"context"
	"sync"

	"github.com/sandpit-dev/sandpit/internal/router"
)

// keyedExposures coordinates the calls that expose one route key (a sandbox
// port, a hostname) so that a rollback undoes only what nobody else relies
// on. The store decides who inserted the row; this decides what the inserting
// call may undo when its install fails:
//
//   - A call that found the row (a retry) installs while holding the key, and
//     if that install succeeds while the inserting call's install is still in
//     flight it marks the insert confirmed.
//   - The inserting call installs without holding the key (so a retry is
//     never stuck behind a slow install), and when its install fails it takes
//     the key and deletes the row only if no retry confirmed it.
//
// So a retry that answered success keeps its row even when the first call's
// install failed (Caddy refused one request and accepted the next), and a
// retry that found the row gone after a rollback inserts it anew itself.
type keyedExposures struct {
	mu   sync.Mutex
	keys map[string]*exposureKey
}

type exposureKey struct {
	mu       sync.Mutex
	refs     int             // guarded by keyedExposures.mu
	inflight *inflightInsert // guarded by mu
}

// inflightInsert is a row inserted by a call whose install has not finished.
type inflightInsert struct{ confirmed bool }

// lock takes the key's lock and returns it with its unlock function.
func (k *keyedExposures) lock(key string) (*exposureKey, func()) {
	k.mu.Lock()
	if k.keys == nil {
		k.keys = map[string]*exposureKey{}
	}
	e, ok := k.keys[key]
	if !ok {
		e = &exposureKey{}
		k.keys[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return e, func() {
		keep := e.inflight != nil
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 && !keep {
			delete(k.keys, key)
		}
		k.mu.Unlock()
	}
}

// claimOutcome is what a store claim found.
type claimOutcome struct {
	inserted bool         // this call inserted the row
	install  bool         // the route must be installed now (sandbox running)
	route    router.Route // the route to install
}

// claimAndInstall runs claim under the key, installs the route with the
// rule above, and calls rollback (delete the row) when this call inserted
// the row, its install failed and no retry confirmed it. It returns claim's
// error as is, and the install's error for the caller to wrap.
func (s *Service) claimAndInstall(ctx context.Context, key string, claim func() (claimOutcome, error), rollback func(ctx context.Context)) (claimOutcome, error, error) {
	e, unlock := s.exposing.lock(key)
	out, err := claim()
	if err != nil || !out.install || s.router == nil {
		unlock()
		return out, err, nil
	}
	if !out.inserted {
		ierr := s.router.Install(ctx, out.route)
		if ierr == nil && e.inflight != nil {
			e.inflight.confirmed = true
		}
		unlock()
		return out, nil, ierr
	}
	mine := &inflightInsert{}
	e.inflight = mine
	unlock()

	ierr := s.router.Install(ctx, out.route)

	e, unlock = s.exposing.lock(key)
	defer unlock()
	if e.inflight == mine {
		e.inflight = nil
	}
	if ierr != nil && !mine.confirmed {
		rollback(context.WithoutCancel(ctx))
	}
	return out, nil, ierr
}
