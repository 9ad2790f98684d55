package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// RevokePreviewToken records that a signed preview token of sandboxID stops
// working before its expiry. Revoking a token again is a no-op. Revocations
// of tokens that have expired on their own are pruned in the same
// transaction, since the expiry alone refuses those. An unknown sandbox
// gives ErrNotFound.
func (s *Store) RevokePreviewToken(ctx context.Context, sandboxID, token string, expiresAt, now time.Time) error {
	if sandboxID == "" || token == "" {
		return errors.New("revoke preview token: sandbox id and token must not be empty")
	}
	now = clock(now)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("revoke preview token of %s: %w", sandboxID, err)
	}
	defer rollback(tx)
	if _, err := s.exec(ctx, tx, `DELETE FROM daytona_preview_revocations WHERE expires_at < ?`, toNanos(now)); err != nil {
		return fmt.Errorf("revoke preview token of %s: prune: %w", sandboxID, err)
	}
	_, err = s.exec(ctx, tx, `INSERT INTO daytona_preview_revocations (token, sandbox_id, expires_at, revoked_at)
		VALUES (?, ?, ?, ?) ON CONFLICT (token) DO NOTHING`, token, sandboxID, toNanos(expiresAt), toNanos(now))
	if err != nil {
		if isForeignKeyViolation(err) {
			return fmt.Errorf("revoke preview token: sandbox %s: %w", sandboxID, sandpit.ErrNotFound)
		}
		return fmt.Errorf("revoke preview token of %s: %w", sandboxID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("revoke preview token of %s: commit: %w", sandboxID, err)
	}
	return nil
}

// PreviewTokenRevoked reports whether token was revoked.
func (s *Store) PreviewTokenRevoked(ctx context.Context, token string) (bool, error) {
	var one int
	err := s.queryRow(ctx, nil, `SELECT 1 FROM daytona_preview_revocations WHERE token = ?`, token).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("preview token revoked: %w", err)
	}
	return true, nil
}

// PreviewRevocation is one revoked signed preview token and the expiry it
// was signed with.
type PreviewRevocation struct {
	Token     string
	ExpiresAt time.Time
}

// ListPreviewRevocations returns the revocations of sandboxID's tokens that
// have not expired by now, oldest first.
func (s *Store) ListPreviewRevocations(ctx context.Context, sandboxID string, now time.Time) ([]PreviewRevocation, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT token, expires_at FROM daytona_preview_revocations
		WHERE sandbox_id = ? AND expires_at >= ? ORDER BY revoked_at, token`, sandboxID, toNanos(clock(now)))
	if err != nil {
		return nil, fmt.Errorf("list preview revocations of %s: %w", sandboxID, err)
	}
	defer rows.Close()
	var out []PreviewRevocation
	for rows.Next() {
		var r PreviewRevocation
		var exp int64
		if err := rows.Scan(&r.Token, &exp); err != nil {
			return nil, fmt.Errorf("list preview revocations of %s: %w", sandboxID, err)
		}
		r.ExpiresAt = fromNanos(exp)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list preview revocations of %s: %w", sandboxID, err)
	}
	return out, nil
}
