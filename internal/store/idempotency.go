package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Idempotency row states.
const (
	idemPending = "pending"
	idemReady   = "ready"
)

// claimAttempts bounds how often ClaimIdempotentRequest re-reads a row whose
// conditional reset lost to another writer. With one connection and a
// transaction that holds the write lock this never happens; the bound only
// keeps a broken invariant from turning into an endless loop.
const claimAttempts = 4

const idemColumns = `scope, fingerprint, target_id, state, generation, request_hash,
	response_status, response_body, locked_until, replay_until`

const (
	qClaimInsert = `INSERT INTO request_idempotency
			(scope, fingerprint, state, generation, request_hash, locked_until, created_at, updated_at)
		VALUES (?, ?, 'pending', 1, ?, ?, ?, ?)
		ON CONFLICT (scope, fingerprint) DO NOTHING`
	qClaimSelect = `SELECT ` + idemColumns + ` FROM request_idempotency WHERE scope = ? AND fingerprint = ?`
	// qClaimRenewLock takes over a pending row whose lock expired. It matches
	// only the row exactly as the claimer read it.
	qClaimRenewLock = `UPDATE request_idempotency
		SET locked_until = ?, updated_at = ?,
		    request_hash = CASE WHEN ? <> '' THEN ? ELSE request_hash END
		WHERE scope = ? AND fingerprint = ?
		  AND state = 'pending' AND generation = ? AND locked_until = ?`
	// qClaimRestart starts the next generation of a ready row whose replay
	// window closed, again only if it is still the row the claimer read.
	qClaimRestart = `UPDATE request_idempotency
		SET state = 'pending', generation = generation + 1, target_id = '',
		    request_hash = ?, response_status = 0, response_body = NULL,
		    locked_until = ?, replay_until = NULL, updated_at = ?
		WHERE scope = ? AND fingerprint = ?
		  AND state = 'ready' AND generation = ?`
	qSetTarget = `UPDATE request_idempotency SET target_id = ?, updated_at = ?
		WHERE scope = ? AND fingerprint = ? AND state = 'pending' AND generation = ?`
	qComplete = `UPDATE request_idempotency
		SET state = 'ready',
		    target_id = CASE WHEN ? <> '' THEN ? ELSE target_id END,
		    response_status = ?, response_body = ?,
		    replay_until = ?, updated_at = ?
		WHERE scope = ? AND fingerprint = ? AND state = 'pending' AND generation = ?`
)

// ClaimIdempotentRequest decides, in one transaction, whether this caller runs
// the request named by (req.Scope, req.Fingerprint):
//
//   - No row: the INSERT ... ON CONFLICT DO NOTHING creates a pending row at
//     generation 1, locked for req.PendingTTL. Acquired.
//   - A row made by a request with another hash (req.RequestHash non-empty),
//     while it still binds the key: Mismatch, nothing changes. A ready row
//     whose replay window has closed no longer binds the key, so it is reset
//     for the new request instead.
//   - Ready, replay window open: Replay, with the stored target and response.
//   - Pending, lock live: InFlight; the caller should poll with
//     GetIdempotentRequest until the row turns ready or the lock runs out.
//   - Pending, lock expired (the attempt crashed or stalled): the lock is
//     renewed and the caller takes the attempt over. Generation and target_id
//     are kept, because this is the same attempt resumed: a target recorded
//     with SetIdempotentTarget may already exist and must be reused.
//     Acquired.
//   - Ready, replay window closed: the row starts over as pending at the next
//     generation with no target or response. Acquired.
//
// The resets are conditional UPDATEs that match only the row as it was read
// (state, generation and expiry), so however many claimers see the same stale
// row, exactly one of them acquires it.
func (s *Store) ClaimIdempotentRequest(ctx context.Context, req sandpit.ClaimRequest, now time.Time) (sandpit.Claim, error) {
	if req.Scope == "" || req.Fingerprint == "" {
		return sandpit.Claim{}, errors.New("claim idempotent request: scope and fingerprint must not be empty")
	}
	if req.PendingTTL <= 0 {
		return sandpit.Claim{}, fmt.Errorf("claim idempotent request %s/%s: pending TTL must be positive", req.Scope, req.Fingerprint)
	}
	now = clock(now)
	nowNs := toNanos(now)
	lockNs := toNanos(now.Add(req.PendingTTL))
	what := fmt.Sprintf("claim idempotent request %s/%s", req.Scope, req.Fingerprint)

	// The common case, a key never seen, is one autocommitted statement: the
	// INSERT ... ON CONFLICT DO NOTHING either creates the row (Acquired) or
	// changes nothing. Only when the row exists does the claim open a
	// transaction to read and perhaps reset it, so the first claim of a key
	// costs one commit like any single-row insert.
	res, err := s.exec(ctx, nil, qClaimInsert,
		req.Scope, req.Fingerprint, req.RequestHash, lockNs, nowNs, nowNs)
	if err != nil {
		return sandpit.Claim{}, fmt.Errorf("%s: insert: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return sandpit.Claim{}, fmt.Errorf("%s: insert: %w", what, err)
	}
	if n == 1 {
		return sandpit.Claim{
			Outcome:     sandpit.Acquired,
			Scope:       req.Scope,
			Fingerprint: req.Fingerprint,
			Generation:  1,
			State:       idemPending,
			RequestHash: req.RequestHash,
			LockedUntil: fromNanos(lockNs),
		}, nil
	}

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return sandpit.Claim{}, fmt.Errorf("%s: %w", what, err)
	}
	defer rollback(tx)

	for range claimAttempts {
		row, err := scanClaim(s.queryRow(ctx, tx, qClaimSelect, req.Scope, req.Fingerprint))
		if errors.Is(err, sql.ErrNoRows) {
			// The row existed a statement ago and this transaction holds the
			// write lock, so this means the invariant above is broken.
			return sandpit.Claim{}, fmt.Errorf("%s: row vanished inside the claiming transaction", what)
		}
		if err != nil {
			return sandpit.Claim{}, fmt.Errorf("%s: read: %w", what, err)
		}
		replayOpen := row.State == idemReady && !row.ReplayUntil.IsZero() && toNanos(row.ReplayUntil) > nowNs
		lockLive := row.State == idemPending && toNanos(row.LockedUntil) > nowNs
		bindsKey := row.State == idemPending || replayOpen

		var reset sql.Result
		var out sandpit.Claim
		switch {
		case bindsKey && req.RequestHash != "" && row.RequestHash != req.RequestHash:
			row.Outcome = sandpit.Mismatch
			return row, nil
		case replayOpen:
			row.Outcome = sandpit.Replay
			return row, nil
		case lockLive:
			row.Outcome = sandpit.InFlight
			// Pollers need no stored response, and a pending row has none.
			return row, nil
		case row.State == idemPending:
			// The previous attempt's lock ran out without completing.
			reset, err = s.exec(ctx, tx, qClaimRenewLock,
				lockNs, nowNs, req.RequestHash, req.RequestHash,
				req.Scope, req.Fingerprint, row.Generation, toNanos(row.LockedUntil))
			out = row
			out.LockedUntil = fromNanos(lockNs)
			if req.RequestHash != "" {
				out.RequestHash = req.RequestHash
			}
		default:
			// Ready and the replay window has closed: a genuinely new request.
			reset, err = s.exec(ctx, tx, qClaimRestart,
				req.RequestHash, lockNs, nowNs,
				req.Scope, req.Fingerprint, row.Generation)
			out = sandpit.Claim{
				Scope:       req.Scope,
				Fingerprint: req.Fingerprint,
				Generation:  row.Generation + 1,
				State:       idemPending,
				RequestHash: req.RequestHash,
				LockedUntil: fromNanos(lockNs),
			}
		}
		if err != nil {
			return sandpit.Claim{}, fmt.Errorf("%s: reset stale row: %w", what, err)
		}
		n, err := reset.RowsAffected()
		if err != nil {
			return sandpit.Claim{}, fmt.Errorf("%s: reset stale row: %w", what, err)
		}
		if n == 0 {
			// Someone changed the row since we read it; decide again from
			// what is there now.
			continue
		}
		if err := tx.Commit(); err != nil {
			return sandpit.Claim{}, fmt.Errorf("%s: commit: %w", what, err)
		}
		out.Outcome = sandpit.Acquired
		out.State = idemPending
		return out, nil
	}
	return sandpit.Claim{}, fmt.Errorf("%s: row kept changing under the claim", what)
}

// SetIdempotentTarget records the resource id chosen by the holder of a
// pending claim, before it creates that resource, so that whoever takes over
// a crashed attempt reuses the id instead of creating a second resource. It
// returns ErrClaimLost when the row is gone, already ready, or at another
// generation.
func (s *Store) SetIdempotentTarget(ctx context.Context, scope, fingerprint string, generation int64, targetID string, now time.Time) error {
	res, err := s.exec(ctx, nil, qSetTarget,
		targetID, toNanos(clock(now)), scope, fingerprint, generation)
	if err != nil {
		return fmt.Errorf("set idempotent target %s/%s: %w", scope, fingerprint, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("set idempotent target %s/%s: %w", scope, fingerprint, err)
	}
	if n == 0 {
		return fmt.Errorf("set idempotent target %s/%s generation %d: %w", scope, fingerprint, generation, sandpit.ErrClaimLost)
	}
	return nil
}

// RenewIdempotentClaim moves a pending claim's lock to lockedUntil while its
// holder is still working, so that a request running longer than the pending
// TTL is not taken for dead and run a second time by its retry. It returns
// ErrClaimLost when the row is not pending at that generation.
func (s *Store) RenewIdempotentClaim(ctx context.Context, scope, fingerprint string, generation int64, lockedUntil, now time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE request_idempotency SET locked_until = ?, updated_at = ?
		WHERE scope = ? AND fingerprint = ? AND state = 'pending' AND generation = ?`,
		toNanos(clock(lockedUntil)), toNanos(clock(now)), scope, fingerprint, generation)
	if err != nil {
		return fmt.Errorf("renew idempotent claim %s/%s: %w", scope, fingerprint, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("renew idempotent claim %s/%s: %w", scope, fingerprint, err)
	}
	if n == 0 {
		return fmt.Errorf("renew idempotent claim %s/%s generation %d: %w", scope, fingerprint, generation, sandpit.ErrClaimLost)
	}
	return nil
}

// CompleteIdempotentRequest turns the pending row of c.Generation ready,
// storing the target (an empty c.TargetID keeps the one recorded by
// SetIdempotentTarget) and the response, replayable until now + c.ReplayTTL.
// It returns ErrClaimLost when the row is not pending at that generation, for
// example because it was deleted or a later generation took it over.
func (s *Store) CompleteIdempotentRequest(ctx context.Context, c sandpit.Completion, now time.Time) error {
	if c.ReplayTTL < 0 {
		return fmt.Errorf("complete idempotent request %s/%s: replay TTL must not be negative", c.Scope, c.Fingerprint)
	}
	now = clock(now)
	res, err := s.exec(ctx, nil, qComplete,
		c.TargetID, c.TargetID, c.ResponseStatus, c.ResponseBody,
		toNanos(now.Add(c.ReplayTTL)), toNanos(now),
		c.Scope, c.Fingerprint, c.Generation)
	if err != nil {
		return fmt.Errorf("complete idempotent request %s/%s: %w", c.Scope, c.Fingerprint, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("complete idempotent request %s/%s: %w", c.Scope, c.Fingerprint, err)
	}
	if n == 0 {
		return fmt.Errorf("complete idempotent request %s/%s generation %d: %w", c.Scope, c.Fingerprint, c.Generation, sandpit.ErrClaimLost)
	}
	return nil
}

// GetIdempotentRequest returns the row as it stands, for callers polling an
// InFlight claim. Outcome is left zero. It returns ErrNotFound when there is
// no row.
func (s *Store) GetIdempotentRequest(ctx context.Context, scope, fingerprint string) (sandpit.Claim, error) {
	c, err := scanClaim(s.queryRow(ctx, nil, qClaimSelect, scope, fingerprint))
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.Claim{}, fmt.Errorf("get idempotent request %s/%s: %w", scope, fingerprint, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.Claim{}, fmt.Errorf("get idempotent request %s/%s: %w", scope, fingerprint, err)
	}
	return c, nil
}

// DeleteIdempotentRequest removes the row so that the next attempt starts
// afresh instead of waiting out the lock; callers use it when the work failed
// and was rolled back. Deleting a missing row is not an error.
func (s *Store) DeleteIdempotentRequest(ctx context.Context, scope, fingerprint string) error {
	if _, err := s.db.ExecContext(ctx,
		`DELETE FROM request_idempotency WHERE scope = ? AND fingerprint = ?`, scope, fingerprint); err != nil {
		return fmt.Errorf("delete idempotent request %s/%s: %w", scope, fingerprint, err)
	}
	return nil
}

// DeleteIdempotentRequestsFor removes the answers recorded for requests
// that made targetID in scopes starting with scopePrefix, so that a retry
// of such a request does the work again instead of replaying an answer
// that no longer holds (a build the daemon died during).
func (s *Store) DeleteIdempotentRequestsFor(ctx context.Context, scopePrefix, targetID string) (int64, error) {
	if targetID == "" {
		return 0, nil
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM request_idempotency WHERE target_id = ? AND substr(scope, 1, ?) = ?`,
		targetID, len(scopePrefix), scopePrefix)
	if err != nil {
		return 0, fmt.Errorf("delete idempotent requests for %s: %w", targetID, err)
	}
	return res.RowsAffected()
}

// ReapIdempotentRequests deletes the rows that are past both their pending
// lock and their replay window, and returns how many it deleted. A pending
// row whose lock is still live is never touched, and neither is a ready row
// that can still be replayed.
func (s *Store) ReapIdempotentRequests(ctx context.Context, now time.Time) (int64, error) {
	nowNs := toNanos(clock(now))
	res, err := s.db.ExecContext(ctx, `
		DELETE FROM request_idempotency
		WHERE locked_until < ? AND (replay_until IS NULL OR replay_until < ?)`, nowNs, nowNs)
	if err != nil {
		return 0, fmt.Errorf("reap idempotent requests: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("reap idempotent requests: %w", err)
	}
	return n, nil
}

// ExpirePendingClaims ends, as of now, the lock of every pending
// request_idempotency row, keeps each such row for at least keep from now,
// and returns how many rows it changed. The daemon calls it once at start,
// before it serves: one process holds the data directory exclusively, so no
// attempt that claimed a row before the start is still running, and a retry
// must not wait out a dead attempt's lock only to be told the key is in
// flight. The next claim of such a row acquires it (see
// ClaimIdempotentRequest: same generation, same recorded target).
//
// Keeping the row matters as much as expiring it. It records the target the
// crashed attempt chose, and that attempt may have finished the resource just
// before dying; the reaper deletes a row once its lock and its replay window
// have both passed, and without a window it would delete these rows within
// seconds, after which a retry would make a second resource. The window is
// stored in replay_until, which nothing but the reaper reads on a pending
// row; the completion of the taken-over attempt replaces it.
func (s *Store) ExpirePendingClaims(ctx context.Context, now time.Time, keep time.Duration) (int64, error) {
	if keep < 0 {
		return 0, errors.New("expire pending claims: keep must not be negative")
	}
	now = clock(now)
	nowNs := toNanos(now)
	keepNs := toNanos(now.Add(keep))
	res, err := s.db.ExecContext(ctx, `
		UPDATE request_idempotency
		SET locked_until = MIN(locked_until, ?),
		    replay_until = MAX(COALESCE(replay_until, 0), ?),
		    updated_at = ?
		WHERE state = 'pending'`, nowNs, keepNs, nowNs)
	if err != nil {
		return 0, fmt.Errorf("expire pending claims: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("expire pending claims: %w", err)
	}
	return n, nil
}

func scanClaim(r rowScanner) (sandpit.Claim, error) {
	var (
		c           sandpit.Claim
		lockedUntil int64
		replayUntil sql.NullInt64
	)
	if err := r.Scan(&c.Scope, &c.Fingerprint, &c.TargetID, &c.State, &c.Generation, &c.RequestHash,
		&c.ResponseStatus, &c.ResponseBody, &lockedUntil, &replayUntil); err != nil {
		return sandpit.Claim{}, err
	}
	c.LockedUntil = fromNanos(lockedUntil)
	c.ReplayUntil = fromNullNanos(replayUntil)
	return c, nil
}
