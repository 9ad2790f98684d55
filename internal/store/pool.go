package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// PoolSlot is one row of pool_slots: a pooled container, free or adopted.
type PoolSlot struct {
	ID          string // the container's sandpit.sandbox-id label
	Key         string // what a create must ask for to adopt it
	Image       string
	AgentUser   string
	ContainerID string
	Token       string // the pool-only agent token
	CPU         float64
	MemoryMB    int64
	Ready       bool
	SandboxID   string // "" while free
	CreatedAt   time.Time
}

const poolSlotColumns = `id, pool_key, image, agent_user, container_id, token, cpu, memory_mb, ready,
	sandbox_id, created_at`

const (
	// qPoolAdopt claims the oldest ready free slot of a key. It fails on the
	// partial unique index when the sandbox already holds a slot, and
	// changes nothing when no slot is free.
	qPoolAdopt = `UPDATE pool_slots SET sandbox_id = ?, adopted_at = ?
		WHERE id = (SELECT id FROM pool_slots
			WHERE pool_key = ? AND sandbox_id IS NULL AND ready = 1
			ORDER BY created_at, id LIMIT 1)`
	qPoolBySandbox = `SELECT ` + poolSlotColumns + ` FROM pool_slots WHERE sandbox_id = ?`
	qPoolByID      = `SELECT ` + poolSlotColumns + ` FROM pool_slots WHERE id = ?`
)

// AddPoolSlot records a slot before its container is made, so a daemon that
// dies while making it finds the row and removes what was made.
func (s *Store) AddPoolSlot(ctx context.Context, p PoolSlot) error {
	if p.ID == "" || p.Key == "" || p.Token == "" {
		return errors.New("add pool slot: id, key and token must not be empty")
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO pool_slots
		(id, pool_key, image, agent_user, container_id, token, cpu, memory_mb, ready, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)`,
		p.ID, p.Key, p.Image, p.AgentUser, p.ContainerID, p.Token, p.CPU, p.MemoryMB, toNanos(clock(p.CreatedAt)))
	if err != nil {
		return fmt.Errorf("add pool slot %s: %w", p.ID, err)
	}
	return nil
}

// MarkPoolSlotReady makes a free slot adoptable: its container runs and its
// agent answered.
func (s *Store) MarkPoolSlotReady(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE pool_slots SET ready = 1 WHERE id = ? AND sandbox_id IS NULL`, id)
	if err != nil {
		return fmt.Errorf("mark pool slot %s ready: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("mark pool slot %s ready: %w", id, sandpit.ErrNotFound)
	}
	return nil
}

// AdoptPoolSlot gives sandboxID the oldest ready free slot of key and points
// the sandbox's row at the slot's container, in one transaction; or returns
// the slot the sandbox already holds, so a retried create never adopts a
// second one. With no slot of its own and none free it returns ErrNotFound;
// an unknown sandbox also gives ErrNotFound.
func (s *Store) AdoptPoolSlot(ctx context.Context, key, sandboxID string, now time.Time) (PoolSlot, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return PoolSlot{}, fmt.Errorf("adopt pool slot for %s: %w", sandboxID, err)
	}
	defer rollback(tx)
	_, err = s.exec(ctx, tx, qPoolAdopt, sandboxID, toNanos(clock(now)), key)
	switch {
	case err == nil, isUniqueViolation(err):
		// Claimed one, found none, or the sandbox already holds one (the
		// statement was rolled back): the lookup below tells which.
	case isForeignKeyViolation(err):
		return PoolSlot{}, fmt.Errorf("adopt pool slot: sandbox %s: %w", sandboxID, sandpit.ErrNotFound)
	default:
		return PoolSlot{}, fmt.Errorf("adopt pool slot for %s: %w", sandboxID, err)
	}
	p, err := scanPoolSlot(s.queryRow(ctx, tx, qPoolBySandbox, sandboxID))
	if errors.Is(err, sql.ErrNoRows) {
		return PoolSlot{}, fmt.Errorf("adopt pool slot for %s: no free slot of %q: %w", sandboxID, key, sandpit.ErrNotFound)
	}
	if err != nil {
		return PoolSlot{}, fmt.Errorf("adopt pool slot for %s: %w", sandboxID, err)
	}
	if _, err := s.exec(ctx, tx, `UPDATE sandboxes SET container_id = ? WHERE id = ?`, p.ContainerID, sandboxID); err != nil {
		return PoolSlot{}, fmt.Errorf("adopt pool slot for %s: %w", sandboxID, err)
	}
	if err := tx.Commit(); err != nil {
		return PoolSlot{}, fmt.Errorf("adopt pool slot for %s: commit: %w", sandboxID, err)
	}
	return p, nil
}

// GetPoolSlot returns a slot by its id, or ErrNotFound.
func (s *Store) GetPoolSlot(ctx context.Context, id string) (PoolSlot, error) {
	return s.getPoolSlot(ctx, qPoolByID, id)
}

// GetPoolSlotOf returns the slot a sandbox adopted, or ErrNotFound when it
// was created cold.
func (s *Store) GetPoolSlotOf(ctx context.Context, sandboxID string) (PoolSlot, error) {
	return s.getPoolSlot(ctx, qPoolBySandbox, sandboxID)
}

func (s *Store) getPoolSlot(ctx context.Context, q, arg string) (PoolSlot, error) {
	p, err := scanPoolSlot(s.queryRow(ctx, nil, q, arg))
	if errors.Is(err, sql.ErrNoRows) {
		return PoolSlot{}, fmt.Errorf("pool slot %s: %w", arg, sandpit.ErrNotFound)
	}
	if err != nil {
		return PoolSlot{}, fmt.Errorf("pool slot %s: %w", arg, err)
	}
	return p, nil
}

// ListPoolSlots returns every slot, free and adopted.
func (s *Store) ListPoolSlots(ctx context.Context) ([]PoolSlot, error) {
	return s.listPoolSlots(ctx, "")
}

// ListFreePoolSlots returns the slots no sandbox has adopted, ready or not.
func (s *Store) ListFreePoolSlots(ctx context.Context) ([]PoolSlot, error) {
	return s.listPoolSlots(ctx, "WHERE sandbox_id IS NULL")
}

func (s *Store) listPoolSlots(ctx context.Context, where string) ([]PoolSlot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+poolSlotColumns+` FROM pool_slots `+where+` ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list pool slots: %w", err)
	}
	defer rows.Close()
	var out []PoolSlot
	for rows.Next() {
		p, err := scanPoolSlot(rows)
		if err != nil {
			return nil, fmt.Errorf("list pool slots: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// DeletePoolSlot removes a free slot; an adopted slot belongs to its sandbox
// and goes with it, so it is left alone. Deleting a missing slot is not an
// error.
func (s *Store) DeletePoolSlot(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM pool_slots WHERE id = ? AND sandbox_id IS NULL`, id); err != nil {
		return fmt.Errorf("delete pool slot %s: %w", id, err)
	}
	return nil
}

// RetirePoolSlot removes a ready free slot whose pool no longer wants it and
// reports whether it did: a slot adopted (or not yet ready) at the same
// moment stays, and its container with it.
func (s *Store) RetirePoolSlot(ctx context.Context, id string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM pool_slots WHERE id = ? AND sandbox_id IS NULL AND ready = 1`, id)
	if err != nil {
		return false, fmt.Errorf("retire pool slot %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func scanPoolSlot(r rowScanner) (PoolSlot, error) {
	var (
		p       PoolSlot
		sid     sql.NullString
		created int64
	)
	if err := r.Scan(&p.ID, &p.Key, &p.Image, &p.AgentUser, &p.ContainerID, &p.Token, &p.CPU, &p.MemoryMB,
		&p.Ready, &sid, &created); err != nil {
		return PoolSlot{}, err
	}
	p.SandboxID = sid.String
	p.CreatedAt = fromNanos(created)
	return p, nil
}

// AbandonPoolSlot undoes a sandbox's adoption whose container turned out
// unusable: the slot is deleted (its container is being removed) and the
// sandbox's row points at containerID, the container a cold create makes.
func (s *Store) AbandonPoolSlot(ctx context.Context, sandboxID, containerID string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("abandon pool slot of %s: %w", sandboxID, err)
	}
	defer rollback(tx)
	if _, err := tx.ExecContext(ctx, `DELETE FROM pool_slots WHERE sandbox_id = ?`, sandboxID); err != nil {
		return fmt.Errorf("abandon pool slot of %s: %w", sandboxID, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET container_id = ? WHERE id = ?`, containerID, sandboxID); err != nil {
		return fmt.Errorf("abandon pool slot of %s: %w", sandboxID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("abandon pool slot of %s: commit: %w", sandboxID, err)
	}
	return nil
}
