package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// MarkPortPrivate makes the exposure (sandboxID, port) one that the plain
// preview hosts serve only with a credential, and returns the port's preview
// token. The first mark stores token; a later one keeps the stored token and
// returns it, so every caller agrees on one token. A port that is not exposed
// gives ErrNotFound.
func (s *Store) MarkPortPrivate(ctx context.Context, sandboxID string, port int, token string, now time.Time) (string, error) {
	if sandboxID == "" || token == "" {
		return "", errors.New("mark port private: sandbox id and token must not be empty")
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("mark port %s:%d private: %w", sandboxID, port, err)
	}
	defer rollback(tx)
	_, err = s.exec(ctx, tx, `INSERT INTO private_ports (sandbox_id, port, token, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (sandbox_id, port) DO NOTHING`, sandboxID, port, token, toNanos(clock(now)))
	if err != nil {
		if isForeignKeyViolation(err) {
			return "", fmt.Errorf("mark port %s:%d private: not exposed: %w", sandboxID, port, sandpit.ErrNotFound)
		}
		return "", fmt.Errorf("mark port %s:%d private: %w", sandboxID, port, err)
	}
	var stored string
	if err := s.queryRow(ctx, tx, `SELECT token FROM private_ports WHERE sandbox_id = ? AND port = ?`, sandboxID, port).Scan(&stored); err != nil {
		return "", fmt.Errorf("mark port %s:%d private: read back: %w", sandboxID, port, err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("mark port %s:%d private: commit: %w", sandboxID, port, err)
	}
	return stored, nil
}

// PrivatePortToken returns the preview token of a private port; ok is false
// when the port is not private (or not exposed).
func (s *Store) PrivatePortToken(ctx context.Context, sandboxID string, port int) (token string, ok bool, err error) {
	err = s.queryRow(ctx, nil, `SELECT token FROM private_ports WHERE sandbox_id = ? AND port = ?`, sandboxID, port).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("private port %s:%d: %w", sandboxID, port, err)
	}
	return token, true, nil
}

// ListPrivatePorts returns the preview token of each private port of
// sandboxID, by port.
func (s *Store) ListPrivatePorts(ctx context.Context, sandboxID string) (map[int]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT port, token FROM private_ports WHERE sandbox_id = ?`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list private ports of %s: %w", sandboxID, err)
	}
	defer rows.Close()
	out := map[int]string{}
	for rows.Next() {
		var (
			port  int
			token string
		)
		if err := rows.Scan(&port, &token); err != nil {
			return nil, fmt.Errorf("list private ports of %s: %w", sandboxID, err)
		}
		out[port] = token
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list private ports of %s: %w", sandboxID, err)
	}
	return out, nil
}

// CountOwnerDomains counts the custom hostnames bound to owner's sandboxes.
func (s *Store) CountOwnerDomains(ctx context.Context, owner string) (int64, error) {
	var n int64
	err := s.queryRow(ctx, nil, `SELECT count(*) FROM sandbox_custom_domains d JOIN sandboxes x ON x.id = d.sandbox_id
		WHERE x.owner = ?`, owner).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count domains of owner %q: %w", owner, err)
	}
	return n, nil
}

// CountPortDomains counts the custom hostnames bound to one port of a sandbox.
func (s *Store) CountPortDomains(ctx context.Context, sandboxID string, port int) (int64, error) {
	var n int64
	err := s.queryRow(ctx, nil, `SELECT count(*) FROM sandbox_custom_domains WHERE sandbox_id = ? AND port = ?`, sandboxID, port).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count domains of %s:%d: %w", sandboxID, port, err)
	}
	return n, nil
}
