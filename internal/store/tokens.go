package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// ErrTokenNameTaken is returned by CreateToken when a live token already has
// the name.
var ErrTokenNameTaken = errors.New("a live token with this name exists")

const tokenColumns = `prefix, name, owner, scopes, secret_hash, created_at, last_used_at, expires_at, revoked_at`

const qTokenByPrefix = `SELECT ` + tokenColumns + ` FROM api_tokens WHERE prefix = ?`

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// CreateToken stores a token. The partial unique index on live names decides
// a duplicate name (ErrTokenNameTaken), so a retried create cannot mint two.
func (s *Store) CreateToken(ctx context.Context, t sandpit.Token) error {
	if t.Prefix == "" || t.Name == "" || t.Owner == "" || len(t.SecretHash) != 32 {
		return errors.New("create token: prefix, name, owner and a 32-byte hash are required")
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_tokens (`+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, NULL, ?, NULL)`,
		t.Prefix, t.Name, t.Owner, strings.Join(t.Scopes, " "), t.SecretHash, toNanos(clock(t.CreatedAt)), nullableNanos(t.ExpiresAt))
	switch {
	case err == nil:
		return nil
	case isUniqueViolation(err):
		return fmt.Errorf("create token %q: %w", t.Name, ErrTokenNameTaken)
	case isPrimaryKeyViolation(err):
		return fmt.Errorf("create token %q: prefix collision, try again", t.Name)
	}
	return fmt.Errorf("create token %q: %w", t.Name, err)
}

// GetTokenByPrefix returns the token with the public prefix, revoked or not,
// or ErrNotFound.
func (s *Store) GetTokenByPrefix(ctx context.Context, prefix string) (sandpit.Token, error) {
	t, err := scanToken(s.queryRow(ctx, nil, qTokenByPrefix, prefix))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("get token: %w", sandpit.ErrNotFound)
	}
	return t, err
}

// ListTokens returns every token, newest first; revoked ones only when asked.
func (s *Store) ListTokens(ctx context.Context, includeRevoked bool) ([]sandpit.Token, error) {
	q := `SELECT ` + tokenColumns + ` FROM api_tokens`
	if !includeRevoked {
		q += ` WHERE revoked_at IS NULL`
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created_at DESC, prefix`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []sandpit.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// RevokeToken revokes the live token with the given name (or public prefix)
// and returns it. A token already revoked, or none, is ErrNotFound.
func (s *Store) RevokeToken(ctx context.Context, nameOrPrefix string, now time.Time) (sandpit.Token, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return sandpit.Token{}, fmt.Errorf("revoke token: %w", err)
	}
	defer rollback(tx)
	t, err := scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM api_tokens
		WHERE revoked_at IS NULL AND (name = ? OR prefix = ?)`, nameOrPrefix, nameOrPrefix))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("revoke token %q: %w", nameOrPrefix, sandpit.ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("revoke token %q: %w", nameOrPrefix, err)
	}
	now = clock(now)
	if _, err := tx.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = ? WHERE prefix = ?`, toNanos(now), t.Prefix); err != nil {
		return t, fmt.Errorf("revoke token %q: %w", nameOrPrefix, err)
	}
	if err := tx.Commit(); err != nil {
		return t, fmt.Errorf("revoke token %q: %w", nameOrPrefix, err)
	}
	t.RevokedAt = now.UTC()
	return t, nil
}

// TouchToken records a use of the token. It writes only when the recorded
// use is older than every, so a busy token costs one write a minute, not one
// per request.
func (s *Store) TouchToken(ctx context.Context, prefix string, now time.Time, every time.Duration) error {
	now = clock(now)
	_, err := s.db.ExecContext(ctx, `UPDATE api_tokens SET last_used_at = ?
		WHERE prefix = ? AND (last_used_at IS NULL OR last_used_at < ?)`,
		toNanos(now), prefix, toNanos(now.Add(-every)))
	if err != nil {
		return fmt.Errorf("touch token: %w", err)
	}
	return nil
}

func scanToken(r rowScanner) (sandpit.Token, error) {
	var (
		t                         sandpit.Token
		scopes                    string
		created                   int64
		lastUsed, expires, revoke sql.NullInt64
	)
	if err := r.Scan(&t.Prefix, &t.Name, &t.Owner, &scopes, &t.SecretHash, &created, &lastUsed, &expires, &revoke); err != nil {
		return sandpit.Token{}, err
	}
	t.Scopes = strings.Fields(scopes)
	t.CreatedAt = fromNanos(created)
	t.LastUsedAt = fromNullNanos(lastUsed)
	t.ExpiresAt = fromNullNanos(expires)
	t.RevokedAt = fromNullNanos(revoke)
	return t, nil
}

// SetOwnerLimits replaces an owner's limits; all zero removes them.
func (s *Store) SetOwnerLimits(ctx context.Context, l sandpit.OwnerLimits, now time.Time) error {
	if l.Owner == "" {
		return errors.New("set owner limits: owner must not be empty")
	}
	if l.MaxSandboxes < 0 || l.MaxCPU < 0 || l.MaxMemoryMB < 0 || l.MaxPorts < 0 || l.MaxDomains < 0 ||
		l.DefaultCPU < 0 || l.DefaultMemoryMB < 0 || l.MaxSandboxCPU < 0 || l.MaxSandboxMemoryMB < 0 {
		return errors.New("set owner limits: limits must not be negative")
	}
	cidrs := l.AllowPrivateCIDRs
	if cidrs == nil {
		cidrs = []string{}
	}
	allow, err := json.Marshal(cidrs)
	if err != nil {
		return fmt.Errorf("set owner limits: %w", err)
	}
	if l.Unlimited() {
		_, err = s.db.ExecContext(ctx, `DELETE FROM owner_limits WHERE owner = ?`, l.Owner)
	} else {
		_, err = s.db.ExecContext(ctx, `INSERT INTO owner_limits (owner, max_sandboxes, max_cpu, max_memory_mb, max_ports, max_domains,
				default_cpu, default_memory_mb, max_sandbox_cpu, max_sandbox_memory_mb, allow_private_cidrs, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (owner) DO UPDATE SET max_sandboxes = excluded.max_sandboxes, max_cpu = excluded.max_cpu,
				max_memory_mb = excluded.max_memory_mb, max_ports = excluded.max_ports, max_domains = excluded.max_domains,
				default_cpu = excluded.default_cpu, default_memory_mb = excluded.default_memory_mb,
				max_sandbox_cpu = excluded.max_sandbox_cpu, max_sandbox_memory_mb = excluded.max_sandbox_memory_mb,
				allow_private_cidrs = excluded.allow_private_cidrs, updated_at = excluded.updated_at`,
			l.Owner, l.MaxSandboxes, l.MaxCPU, l.MaxMemoryMB, l.MaxPorts, l.MaxDomains,
			l.DefaultCPU, l.DefaultMemoryMB, l.MaxSandboxCPU, l.MaxSandboxMemoryMB, string(allow), toNanos(clock(now)))
	}
	if err != nil {
		return fmt.Errorf("set limits of owner %q: %w", l.Owner, err)
	}
	return nil
}

// GetOwnerLimits returns an owner's limits; an owner without a row has none
// (every field zero).
func (s *Store) GetOwnerLimits(ctx context.Context, owner string) (sandpit.OwnerLimits, error) {
	l := sandpit.OwnerLimits{Owner: owner}
	var (
		updated int64
		allow   string
	)
	err := s.db.QueryRowContext(ctx, `SELECT max_sandboxes, max_cpu, max_memory_mb, max_ports, max_domains,
			default_cpu, default_memory_mb, max_sandbox_cpu, max_sandbox_memory_mb, allow_private_cidrs, updated_at
		FROM owner_limits WHERE owner = ?`, owner).Scan(&l.MaxSandboxes, &l.MaxCPU, &l.MaxMemoryMB, &l.MaxPorts, &l.MaxDomains,
		&l.DefaultCPU, &l.DefaultMemoryMB, &l.MaxSandboxCPU, &l.MaxSandboxMemoryMB, &allow, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("get limits of owner %q: %w", owner, err)
	}
	if err := json.Unmarshal([]byte(allow), &l.AllowPrivateCIDRs); err != nil {
		return l, fmt.Errorf("get limits of owner %q: allow_private_cidrs: %w", owner, err)
	}
	if len(l.AllowPrivateCIDRs) == 0 {
		l.AllowPrivateCIDRs = nil
	}
	l.UpdatedAt = fromNanos(updated)
	return l, nil
}

// OwnerUsage is what an owner holds now.
type OwnerUsage struct {
	Sandboxes int64
	CPU       float64
	MemoryMB  int64
	Ports     int64
	Domains   int64
}

// GetOwnerUsage returns what the owner holds now.
func (s *Store) GetOwnerUsage(ctx context.Context, owner string) (OwnerUsage, error) {
	return ownerUsage(ctx, s.db, owner)
}

func ownerUsage(ctx context.Context, q querier, owner string) (OwnerUsage, error) {
	var u OwnerUsage
	err := q.QueryRowContext(ctx, `SELECT count(*), COALESCE(sum(cpu), 0), COALESCE(sum(memory_mb), 0),
		(SELECT count(*) FROM exposed_ports p JOIN sandboxes x ON x.id = p.sandbox_id WHERE x.owner = ?),
		(SELECT count(*) FROM sandbox_custom_domains d JOIN sandboxes x ON x.id = d.sandbox_id WHERE x.owner = ?)
		FROM sandboxes WHERE owner = ?`, owner, owner, owner).Scan(&u.Sandboxes, &u.CPU, &u.MemoryMB, &u.Ports, &u.Domains)
	if err != nil {
		return u, fmt.Errorf("usage of owner %q: %w", owner, err)
	}
	return u, nil
}

// AppendAudit appends one entry to the audit log.
func (s *Store) AppendAudit(ctx context.Context, e sandpit.AuditEntry) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO audit_log (at, token_name, owner, action, resource, outcome, detail)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, toNanos(clock(e.At)), e.TokenName, e.Owner, e.Action, e.Resource, e.Outcome, e.Detail)
	if err != nil {
		return fmt.Errorf("append audit entry: %w", err)
	}
	return nil
}

// ListAudit returns audit entries in append order.
func (s *Store) ListAudit(ctx context.Context, q sandpit.AuditQuery) ([]sandpit.AuditEntry, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	limit = min(limit, maxListLimit)
	rows, err := s.db.QueryContext(ctx, `SELECT seq, at, token_name, owner, action, resource, outcome, detail
		FROM audit_log WHERE seq > ? AND (? = '' OR owner = ?) ORDER BY seq LIMIT ?`,
		q.AfterSeq, q.Owner, q.Owner, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	defer rows.Close()
	var out []sandpit.AuditEntry
	for rows.Next() {
		var e sandpit.AuditEntry
		var at int64
		if err := rows.Scan(&e.Seq, &at, &e.TokenName, &e.Owner, &e.Action, &e.Resource, &e.Outcome, &e.Detail); err != nil {
			return nil, fmt.Errorf("list audit: %w", err)
		}
		e.At = fromNanos(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// ReapAudit deletes the entries older than before: the log's retention.
func (s *Store) ReapAudit(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM audit_log WHERE at < ?`, toNanos(before))
	if err != nil {
		return 0, fmt.Errorf("reap audit log: %w", err)
	}
	return res.RowsAffected()
}
