package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sandpit-dev/sandpit"
)

// sandboxIndex is an in-memory copy of two columns of every sandbox row: its
// access token and whether it is running. It answers, without a query on the
// one connection, the questions unauthenticated requests ask ("is this a
// sandbox?", "which running sandbox signed this URL?"), so that no request
// that presents no credential can make the writer wait or write.
//
// It is loaded at Open and updated after every commit that inserts, deletes
// or changes the state of a row. Two writes to one row are never concurrent
// (the service serialises the lifecycle operations on a sandbox), so the
// order of the updates here is the order of the commits.
type sandboxIndex struct {
	mu   sync.RWMutex
	rows map[string]indexedSandbox
}

type indexedSandbox struct {
	token   string
	running bool
	paused  bool
}

func (x *sandboxIndex) load(ctx context.Context, s *Store) error {
	rows, err := s.db.QueryContext(ctx, `SELECT id, access_token, state FROM sandboxes`)
	if err != nil {
		return fmt.Errorf("load sandbox index: %w", err)
	}
	defer rows.Close()
	m := map[string]indexedSandbox{}
	for rows.Next() {
		var id, token, state string
		if err := rows.Scan(&id, &token, &state); err != nil {
			return fmt.Errorf("load sandbox index: %w", err)
		}
		m[id] = indexedSandbox{token: token, running: state == string(sandpit.StateRunning), paused: state == string(sandpit.StatePaused)}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load sandbox index: %w", err)
	}
	x.mu.Lock()
	x.rows = m
	x.mu.Unlock()
	return nil
}

func (x *sandboxIndex) put(id, token string, state sandpit.State) {
	x.mu.Lock()
	if x.rows == nil {
		x.rows = map[string]indexedSandbox{}
	}
	x.rows[id] = indexedSandbox{token: token, running: state == sandpit.StateRunning, paused: state == sandpit.StatePaused}
	x.mu.Unlock()
}

func (x *sandboxIndex) setState(id string, state sandpit.State) {
	x.mu.Lock()
	if e, ok := x.rows[id]; ok {
		e.running = state == sandpit.StateRunning
		e.paused = state == sandpit.StatePaused
		x.rows[id] = e
	}
	x.mu.Unlock()
}

func (x *sandboxIndex) remove(id string) {
	x.mu.Lock()
	delete(x.rows, id)
	x.mu.Unlock()
}

// SandboxKnown reports whether a sandbox row with this id exists, from
// memory.
func (s *Store) SandboxKnown(id string) bool {
	s.index.mu.RLock()
	defer s.index.mu.RUnlock()
	_, ok := s.index.rows[id]
	return ok
}

// SandboxPaused reports whether a sandbox row with this id is paused, from
// memory: traffic for a sandbox that may auto-resume asks on every request.
func (s *Store) SandboxPaused(id string) bool {
	s.index.mu.RLock()
	defer s.index.mu.RUnlock()
	return s.index.rows[id].paused
}

// FindRunningByToken returns the id of a running sandbox whose access token
// satisfies match, or "" when none does. It reads memory only; match is
// called with the index's read lock held, so it must not call the store.
func (s *Store) FindRunningByToken(match func(token string) bool) string {
	s.index.mu.RLock()
	defer s.index.mu.RUnlock()
	for id, e := range s.index.rows {
		if e.running && e.token != "" && match(e.token) {
			return id
		}
	}
	return ""
}

// activityWrites counts the activity UPDATEs TouchSandbox issued.
type activityWrites struct{ n atomic.Int64 }

// ActivityWrites is how many activity records (TouchSandbox) reached the
// database since Open: the write cost of toolbox calls and preview traffic.
func (s *Store) ActivityWrites() int64 { return s.activity.n.Load() }
