package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// firstVsockCID is the CID of slot 0. CIDs 0-2 are reserved by vsock (the
// hypervisor, loopback and the host).
const firstVsockCID = 3

const (
	// qTapAllocate claims the lowest free slot. It fails on the partial
	// unique index when the sandbox already holds a slot, and changes nothing
	// when no slot is free.
	qTapAllocate = `UPDATE firecracker_tap_pool SET sandbox_id = ?, allocated_at = ?
		WHERE slot = (SELECT slot FROM firecracker_tap_pool WHERE sandbox_id IS NULL ORDER BY slot LIMIT 1)`
	qTapBySandbox = `SELECT slot, tap_name, vsock_cid, sandbox_id FROM firecracker_tap_pool WHERE sandbox_id = ?`
)

func tapName(slot int) string { return fmt.Sprintf("sp-tap%d", slot) }

// SeedTapPool makes sure slots 0..n-1 exist, each with its TAP device name
// "sp-tap<N>" and vsock CID 3+N. Existing slots, and whichever sandboxes hold
// them, are left alone, so seeding on every start is safe. Slots at or above n
// are not removed.
func (s *Store) SeedTapPool(ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("seed tap pool: negative size %d", n)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("seed tap pool: %w", err)
	}
	defer rollback(tx)
	stmt, err := tx.PrepareContext(ctx,
		`INSERT OR IGNORE INTO firecracker_tap_pool (slot, tap_name, vsock_cid) VALUES (?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("seed tap pool: %w", err)
	}
	defer stmt.Close()
	for i := range n {
		if _, err := stmt.ExecContext(ctx, i, tapName(i), firstVsockCID+i); err != nil {
			return fmt.Errorf("seed tap pool: slot %d: %w", i, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("seed tap pool: commit: %w", err)
	}
	return nil
}

// AllocateTapSlot gives sandboxID the lowest free slot, or returns the slot it
// already holds, so a retried allocation never takes a second one. The partial
// unique index on sandbox_id is what refuses a second slot: the UPDATE either
// claims a free slot, fails on that index, or finds no free slot, and only
// then is the sandbox's own slot looked up. With no slot of its own and none
// free the error wraps ErrTapPoolExhausted; an unknown sandbox gives
// ErrNotFound.
func (s *Store) AllocateTapSlot(ctx context.Context, sandboxID string, now time.Time) (sandpit.TapSlot, error) {
	if sandboxID == "" {
		return sandpit.TapSlot{}, errors.New("allocate tap slot: sandbox id must not be empty")
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return sandpit.TapSlot{}, fmt.Errorf("allocate tap slot for %s: %w", sandboxID, err)
	}
	defer rollback(tx)

	res, err := s.exec(ctx, tx, qTapAllocate, sandboxID, toNanos(clock(now)))
	var claimed int64
	switch {
	case err == nil:
		if claimed, err = res.RowsAffected(); err != nil {
			return sandpit.TapSlot{}, fmt.Errorf("allocate tap slot for %s: %w", sandboxID, err)
		}
	case isUniqueViolation(err):
		// The sandbox already holds a slot; the statement was rolled back
		// and the transaction goes on to return that slot.
	case isForeignKeyViolation(err):
		return sandpit.TapSlot{}, fmt.Errorf("allocate tap slot: sandbox %s: %w", sandboxID, sandpit.ErrNotFound)
	default:
		return sandpit.TapSlot{}, fmt.Errorf("allocate tap slot for %s: %w", sandboxID, err)
	}

	slot, err := scanTapSlot(s.queryRow(ctx, tx, qTapBySandbox, sandboxID))
	if errors.Is(err, sql.ErrNoRows) {
		if claimed != 0 {
			return sandpit.TapSlot{}, fmt.Errorf("allocate tap slot for %s: claimed slot not found", sandboxID)
		}
		return sandpit.TapSlot{}, fmt.Errorf("allocate tap slot for %s: %w", sandboxID, sandpit.ErrTapPoolExhausted)
	}
	if err != nil {
		return sandpit.TapSlot{}, fmt.Errorf("allocate tap slot for %s: %w", sandboxID, err)
	}
	if err := tx.Commit(); err != nil {
		return sandpit.TapSlot{}, fmt.Errorf("allocate tap slot for %s: commit: %w", sandboxID, err)
	}
	return slot, nil
}

// GetTapSlot returns the slot sandboxID holds, or ErrNotFound.
func (s *Store) GetTapSlot(ctx context.Context, sandboxID string) (sandpit.TapSlot, error) {
	slot, err := scanTapSlot(s.queryRow(ctx, nil, qTapBySandbox, sandboxID))
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.TapSlot{}, fmt.Errorf("get tap slot of %s: %w", sandboxID, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.TapSlot{}, fmt.Errorf("get tap slot of %s: %w", sandboxID, err)
	}
	return slot, nil
}

// ReleaseTapSlot frees the slot sandboxID holds. Releasing when it holds none
// is not an error, so a retried teardown succeeds.
func (s *Store) ReleaseTapSlot(ctx context.Context, sandboxID string) error {
	if _, err := s.db.ExecContext(ctx, `
		UPDATE firecracker_tap_pool SET sandbox_id = NULL, allocated_at = NULL
		WHERE sandbox_id = ?`, sandboxID); err != nil {
		return fmt.Errorf("release tap slot of %s: %w", sandboxID, err)
	}
	return nil
}

func scanTapSlot(r rowScanner) (sandpit.TapSlot, error) {
	var (
		t   sandpit.TapSlot
		sid sql.NullString
	)
	if err := r.Scan(&t.Slot, &t.TapName, &t.VsockCID, &sid); err != nil {
		return sandpit.TapSlot{}, err
	}
	t.SandboxID = sid.String
	return t, nil
}
