package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// Secret is one row of the secrets table: an owner's named value, sealed by
// the secrets aggregate before it reaches the store. The store never sees a
// value in the clear, so nothing it logs or returns can carry one.
type Secret struct {
	ID       string
	Owner    string
	Name     string
	Sealed   []byte
	Metadata map[string]string
	// Version counts the values the secret has held, from 1.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

const secretColumns = `id, owner, name, sealed, metadata, version, created_at, updated_at`

// InsertSecret stores sec unless its owner has a secret of that name. The
// unique index on (owner, name) decides, not a lookup that could race: when
// the name is taken, the row that holds it is returned with inserted false,
// so that the caller tells a retry (the same value) from a conflict.
//
// An owner holds at most maxPerOwner secrets (0: no bound): the count is
// part of the insert itself, so concurrent creates cannot pass it together;
// a create past it is ErrQuotaExceeded and writes nothing.
func (s *Store) InsertSecret(ctx context.Context, sec Secret, now time.Time, maxPerOwner int) (got Secret, inserted bool, err error) {
	if sec.ID == "" || sec.Owner == "" || sec.Name == "" || len(sec.Sealed) == 0 {
		return Secret{}, false, errors.New("insert secret: id, owner, name and a sealed value are required")
	}
	meta, err := encodeMetadata(sec.Metadata)
	if err != nil {
		return Secret{}, false, err
	}
	at := toNanos(clock(now))
	bound := int64(maxPerOwner)
	if maxPerOwner <= 0 {
		bound = -1
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO secrets (`+secretColumns+`)
		SELECT ?,?,?,?,?,1,?,? WHERE ? < 0 OR (SELECT count(*) FROM secrets WHERE owner = ?) < ?`,
		sec.ID, sec.Owner, sec.Name, sec.Sealed, meta, at, at, bound, sec.Owner, bound)
	if err == nil {
		if n, _ := res.RowsAffected(); n == 0 {
			// At the bound: a retry of a secret the owner has is still a
			// retry, anything else is refused.
			if got, gerr := s.GetSecret(ctx, sec.Owner, sec.Name); gerr == nil {
				return got, false, nil
			}
			return Secret{}, false, fmt.Errorf("secrets: owner holds %d, the most one may: %w", maxPerOwner, sandpit.ErrQuotaExceeded)
		}
	}
	switch {
	case err == nil:
		got, err := s.GetSecret(ctx, sec.Owner, sec.ID)
		return got, true, err
	case isUniqueViolation(err):
		got, err := s.GetSecret(ctx, sec.Owner, sec.Name)
		return got, false, err
	case isPrimaryKeyViolation(err):
		return Secret{}, false, fmt.Errorf("insert secret: id collision, try again")
	}
	return Secret{}, false, fmt.Errorf("insert secret %q: %w", sec.Name, err)
}

// GetSecret returns the owner's secret whose id or name is ref, or
// ErrNotFound. There is no "any owner" form: a secret is only ever its
// owner's to see or use.
func (s *Store) GetSecret(ctx context.Context, owner, ref string) (Secret, error) {
	sec, err := scanSecret(s.db.QueryRowContext(ctx, `SELECT `+secretColumns+` FROM secrets
		WHERE owner = ? AND (id = ? OR name = ?) ORDER BY id = ? DESC LIMIT 1`, owner, ref, ref, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return Secret{}, fmt.Errorf("secret %q: %w", ref, sandpit.ErrNotFound)
	}
	if err != nil {
		return Secret{}, fmt.Errorf("get secret %q: %w", ref, err)
	}
	return sec, nil
}

// ListSecrets returns the owner's secrets, by name.
func (s *Store) ListSecrets(ctx context.Context, owner string) ([]Secret, error) {
	return queryAll(ctx, s.db, "list secrets", scanSecret,
		`SELECT `+secretColumns+` FROM secrets WHERE owner = ? ORDER BY name`, owner)
}

// UpdateSecret replaces the sealed value of the owner's secret id, and its
// metadata unless metadata is nil, and counts a version. A secret that is
// gone is ErrNotFound.
func (s *Store) UpdateSecret(ctx context.Context, owner, id string, sealed []byte, metadata map[string]string, now time.Time) (Secret, error) {
	if len(sealed) == 0 {
		return Secret{}, errors.New("update secret: a sealed value is required")
	}
	q, args := `UPDATE secrets SET sealed = ?, version = version + 1, updated_at = ?`, []any{sealed, toNanos(clock(now))}
	if metadata != nil {
		meta, err := encodeMetadata(metadata)
		if err != nil {
			return Secret{}, err
		}
		q += `, metadata = ?`
		args = append(args, meta)
	}
	res, err := s.db.ExecContext(ctx, q+` WHERE owner = ? AND id = ?`, append(args, owner, id)...)
	if err != nil {
		return Secret{}, fmt.Errorf("update secret %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Secret{}, fmt.Errorf("update secret %s: %w", id, err)
	} else if n == 0 {
		return Secret{}, fmt.Errorf("secret %s: %w", id, sandpit.ErrNotFound)
	}
	return s.GetSecret(ctx, owner, id)
}

// DeleteSecret removes the owner's secret whose id or name is ref and
// returns it; none is ErrNotFound.
func (s *Store) DeleteSecret(ctx context.Context, owner, ref string) (Secret, error) {
	sec, err := scanSecret(s.db.QueryRowContext(ctx, `DELETE FROM secrets WHERE id = (
		SELECT id FROM secrets WHERE owner = ? AND (id = ? OR name = ?) ORDER BY id = ? DESC LIMIT 1)
		RETURNING `+secretColumns, owner, ref, ref, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return Secret{}, fmt.Errorf("secret %q: %w", ref, sandpit.ErrNotFound)
	}
	if err != nil {
		return Secret{}, fmt.Errorf("delete secret %q: %w", ref, err)
	}
	return sec, nil
}

func encodeMetadata(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("secret metadata: %w", err)
	}
	return string(b), nil
}

func scanSecret(r rowScanner) (Secret, error) {
	var (
		sec              Secret
		meta             string
		created, updated int64
	)
	if err := r.Scan(&sec.ID, &sec.Owner, &sec.Name, &sec.Sealed, &meta, &sec.Version, &created, &updated); err != nil {
		return Secret{}, err
	}
	sec.Metadata = map[string]string{}
	if err := json.Unmarshal([]byte(meta), &sec.Metadata); err != nil {
		return Secret{}, fmt.Errorf("secret %s: metadata: %w", sec.ID, err)
	}
	sec.CreatedAt, sec.UpdatedAt = fromNanos(created), fromNanos(updated)
	return sec, nil
}
