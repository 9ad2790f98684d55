package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

const sshKeyColumns = `fingerprint, owner, name, key_type, public_key, created_at, last_used_at`

// AddSSHKey stores k unless its owner registered its fingerprint already.
// The primary key (owner, fingerprint) decides, not a lookup that could
// race: the owner's key again returns the row it has with AlreadyBound
// (whatever name the retry gave), and a name the owner gave another key is
// ErrNameConflict. Other owners' registrations of the same key are theirs:
// a key is only ever accepted for its owner's sandboxes.
func (s *Store) AddSSHKey(ctx context.Context, k sandpit.SSHKey, now time.Time) (sandpit.SSHKey, sandpit.AddOutcome, error) {
	if k.Fingerprint == "" || k.Owner == "" || k.Name == "" || k.PublicKey == "" {
		return sandpit.SSHKey{}, 0, errors.New("add ssh key: fingerprint, owner, name and key must not be empty")
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO ssh_keys (`+sshKeyColumns+`) VALUES (?,?,?,?,?,?,NULL)`,
		k.Fingerprint, k.Owner, k.Name, k.Type, k.PublicKey, toNanos(clock(now)))
	switch {
	case err == nil:
		got, err := s.GetSSHKey(ctx, k.Owner, k.Fingerprint)
		return got, sandpit.Added, err
	case isPrimaryKeyViolation(err) || isUniqueViolation(err):
		got, gerr := s.GetSSHKey(ctx, k.Owner, k.Fingerprint)
		switch {
		case gerr == nil:
			return got, sandpit.AlreadyBound, nil
		case errors.Is(gerr, sandpit.ErrNotFound):
			return sandpit.SSHKey{}, 0, fmt.Errorf("add ssh key: the name %q is another key's: %w", k.Name, sandpit.ErrNameConflict)
		default:
			return sandpit.SSHKey{}, 0, gerr
		}
	default:
		return sandpit.SSHKey{}, 0, fmt.Errorf("add ssh key %s: %w", k.Fingerprint, err)
	}
}

// GetSSHKey returns the owner's key with the fingerprint, or ErrNotFound.
func (s *Store) GetSSHKey(ctx context.Context, owner, fingerprint string) (sandpit.SSHKey, error) {
	k, err := scanSSHKey(s.db.QueryRowContext(ctx, `SELECT `+sshKeyColumns+` FROM ssh_keys WHERE owner = ? AND fingerprint = ?`, owner, fingerprint))
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.SSHKey{}, fmt.Errorf("get ssh key %s: %w", fingerprint, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.SSHKey{}, fmt.Errorf("get ssh key %s: %w", fingerprint, err)
	}
	return k, nil
}

// SSHKeysByFingerprint returns every owner's registration of the key with
// the fingerprint, oldest first (none is an empty list).
func (s *Store) SSHKeysByFingerprint(ctx context.Context, fingerprint string) ([]sandpit.SSHKey, error) {
	return queryAll(ctx, s.db, "ssh keys by fingerprint", scanSSHKey,
		`SELECT `+sshKeyColumns+` FROM ssh_keys WHERE fingerprint = ? ORDER BY created_at, owner`, fingerprint)
}

// ListSSHKeys returns the owner's keys ("" = every owner's), oldest first.
func (s *Store) ListSSHKeys(ctx context.Context, owner string) ([]sandpit.SSHKey, error) {
	q, args := `SELECT `+sshKeyColumns+` FROM ssh_keys`, []any{}
	if owner != "" {
		q += ` WHERE owner = ?`
		args = append(args, owner)
	}
	return queryAll(ctx, s.db, "list ssh keys", scanSSHKey, q+` ORDER BY created_at, fingerprint`, args...)
}

// DeleteSSHKey removes the owner's key ("" = any owner's) whose fingerprint
// or name is ref, and returns it; none is ErrNotFound.
func (s *Store) DeleteSSHKey(ctx context.Context, owner, ref string) (sandpit.SSHKey, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return sandpit.SSHKey{}, fmt.Errorf("delete ssh key: %w", err)
	}
	defer rollback(tx)
	q, args := `SELECT `+sshKeyColumns+` FROM ssh_keys WHERE (fingerprint = ? OR name = ?)`, []any{ref, ref}
	if owner != "" {
		q += ` AND owner = ?`
		args = append(args, owner)
	}
	rows, err := tx.QueryContext(ctx, q+` ORDER BY fingerprint = ? DESC LIMIT 2`, append(args, ref)...)
	if err != nil {
		return sandpit.SSHKey{}, fmt.Errorf("delete ssh key %q: %w", ref, err)
	}
	var found []sandpit.SSHKey
	for rows.Next() {
		k, err := scanSSHKey(rows)
		if err != nil {
			rows.Close()
			return sandpit.SSHKey{}, fmt.Errorf("delete ssh key %q: %w", ref, err)
		}
		found = append(found, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return sandpit.SSHKey{}, fmt.Errorf("delete ssh key %q: %w", ref, err)
	}
	switch {
	case len(found) == 0:
		return sandpit.SSHKey{}, fmt.Errorf("delete ssh key %q: %w", ref, sandpit.ErrNotFound)
	case len(found) > 1 && (found[0].Fingerprint != ref || found[1].Fingerprint == ref):
		// Only an admin deleting by a name, or a key, that two owners
		// registered gets here.
		return sandpit.SSHKey{}, fmt.Errorf("delete ssh key: %q names keys of several owners: %w", ref, sandpit.ErrNameConflict)
	}
	k := found[0]
	if _, err := tx.ExecContext(ctx, `DELETE FROM ssh_keys WHERE owner = ? AND fingerprint = ?`, k.Owner, k.Fingerprint); err != nil {
		return sandpit.SSHKey{}, fmt.Errorf("delete ssh key %q: %w", ref, err)
	}
	if err := tx.Commit(); err != nil {
		return sandpit.SSHKey{}, fmt.Errorf("delete ssh key %q: %w", ref, err)
	}
	return k, nil
}

// TouchSSHKey records a login with the owner's key, at most once per every.
func (s *Store) TouchSSHKey(ctx context.Context, owner, fingerprint string, now time.Time, every time.Duration) error {
	now = clock(now)
	_, err := s.db.ExecContext(ctx, `UPDATE ssh_keys SET last_used_at = ?
		WHERE owner = ? AND fingerprint = ? AND (last_used_at IS NULL OR last_used_at < ?)`,
		toNanos(now), owner, fingerprint, toNanos(now.Add(-every)))
	if err != nil {
		return fmt.Errorf("touch ssh key: %w", err)
	}
	return nil
}

func scanSSHKey(r rowScanner) (sandpit.SSHKey, error) {
	var (
		k        sandpit.SSHKey
		created  int64
		lastUsed sql.NullInt64
	)
	if err := r.Scan(&k.Fingerprint, &k.Owner, &k.Name, &k.Type, &k.PublicKey, &created, &lastUsed); err != nil {
		return sandpit.SSHKey{}, err
	}
	k.CreatedAt = fromNanos(created)
	k.LastUsedAt = fromNullNanos(lastUsed)
	return k, nil
}

const sshTokenColumns = `prefix, secret_hash, owner, sandbox_id, created_by, created_at, expires_at`

// CreateSSHToken stores a short-lived SSH token, and removes the tokens
// that expired before now.
func (s *Store) CreateSSHToken(ctx context.Context, t sandpit.SSHToken, now time.Time) error {
	if t.Prefix == "" || len(t.SecretHash) != 32 || t.Owner == "" || t.SandboxID == "" {
		return errors.New("create ssh token: prefix, a 32-byte hash, owner and sandbox are required")
	}
	now = clock(now)
	if _, err := s.db.ExecContext(ctx, `DELETE FROM ssh_tokens WHERE expires_at <= ?`, toNanos(now)); err != nil {
		return fmt.Errorf("create ssh token: %w", err)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO ssh_tokens (`+sshTokenColumns+`) VALUES (?,?,?,?,?,?,?)`,
		t.Prefix, t.SecretHash, t.Owner, t.SandboxID, t.CreatedBy, toNanos(now), toNanos(t.ExpiresAt))
	switch {
	case err == nil:
		return nil
	case isForeignKeyViolation(err):
		return fmt.Errorf("create ssh token: sandbox %s: %w", t.SandboxID, sandpit.ErrNotFound)
	case isPrimaryKeyViolation(err):
		return fmt.Errorf("create ssh token: prefix collision, try again")
	}
	return fmt.Errorf("create ssh token: %w", err)
}

// GetSSHToken returns the token with the prefix, expired or not, or
// ErrNotFound.
func (s *Store) GetSSHToken(ctx context.Context, prefix string) (sandpit.SSHToken, error) {
	var (
		t                sandpit.SSHToken
		created, expires int64
	)
	err := s.db.QueryRowContext(ctx, `SELECT `+sshTokenColumns+` FROM ssh_tokens WHERE prefix = ?`, prefix).
		Scan(&t.Prefix, &t.SecretHash, &t.Owner, &t.SandboxID, &t.CreatedBy, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.SSHToken{}, fmt.Errorf("get ssh token: %w", sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.SSHToken{}, fmt.Errorf("get ssh token: %w", err)
	}
	t.CreatedAt, t.ExpiresAt = fromNanos(created), fromNanos(expires)
	return t, nil
}

// DeleteSSHTokens removes every SSH token of the sandbox and returns their
// prefixes.
func (s *Store) DeleteSSHTokens(ctx context.Context, sandboxID string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `DELETE FROM ssh_tokens WHERE sandbox_id = ? RETURNING prefix`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("delete ssh tokens: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("delete ssh tokens: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// DeleteSSHToken removes one SSH token of the sandbox, by its prefix, and
// reports whether there was one.
func (s *Store) DeleteSSHToken(ctx context.Context, sandboxID, prefix string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM ssh_tokens WHERE sandbox_id = ? AND prefix = ?`, sandboxID, prefix)
	if err != nil {
		return false, fmt.Errorf("delete ssh token: %w", err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
