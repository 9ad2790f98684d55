package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

const domainColumns = `hostname, sandbox_id, port, created_at`

const (
	qDomainInsert     = `INSERT OR IGNORE INTO sandbox_custom_domains (` + domainColumns + `) VALUES (?, ?, ?, ?)`
	qDomainByHostname = `SELECT ` + domainColumns + ` FROM sandbox_custom_domains WHERE hostname = ?`
)

// AddCustomDomain binds d.Hostname to (d.SandboxID, d.Port). The hostname
// primary key decides races: the INSERT OR IGNORE either creates the binding
// (Added) or leaves the existing one, which is then read back. If that is the
// same sandbox and port, the call was a retry and gets AlreadyBound with the
// stored row; any other binding is an error wrapping ErrHostnameConflict.
// Hostnames compare case-insensitively. An unknown sandbox gives ErrNotFound.
func (s *Store) AddCustomDomain(ctx context.Context, d sandpit.CustomDomain, now time.Time) (sandpit.CustomDomain, sandpit.AddOutcome, error) {
	if d.Hostname == "" || d.SandboxID == "" {
		return sandpit.CustomDomain{}, 0, errors.New("add custom domain: hostname and sandbox id must not be empty")
	}
	if d.Port < 1 || d.Port > 65535 {
		// OR IGNORE would swallow the CHECK failure; reject it up front.
		return sandpit.CustomDomain{}, 0, fmt.Errorf("add custom domain %s: port %d out of range 1-65535", d.Hostname, d.Port)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return sandpit.CustomDomain{}, 0, fmt.Errorf("add custom domain %s: %w", d.Hostname, err)
	}
	defer rollback(tx)

	res, err := s.exec(ctx, tx, qDomainInsert, d.Hostname, d.SandboxID, d.Port, toNanos(clock(now)))
	if err != nil {
		if isForeignKeyViolation(err) {
			return sandpit.CustomDomain{}, 0, fmt.Errorf("add custom domain %s: sandbox %s: %w", d.Hostname, d.SandboxID, sandpit.ErrNotFound)
		}
		return sandpit.CustomDomain{}, 0, fmt.Errorf("add custom domain %s: %w", d.Hostname, err)
	}
	inserted, err := res.RowsAffected()
	if err != nil {
		return sandpit.CustomDomain{}, 0, fmt.Errorf("add custom domain %s: %w", d.Hostname, err)
	}
	row, err := scanDomain(s.queryRow(ctx, tx, qDomainByHostname, d.Hostname))
	if err != nil {
		return sandpit.CustomDomain{}, 0, fmt.Errorf("add custom domain %s: read back: %w", d.Hostname, err)
	}
	outcome := sandpit.Added
	if inserted == 0 {
		if row.SandboxID != d.SandboxID || row.Port != d.Port {
			// The message names neither the other sandbox nor its port: the
			// binding may belong to another owner, whose ids are not the
			// caller's to learn.
			return sandpit.CustomDomain{}, 0, fmt.Errorf("add custom domain %s for sandbox %s port %d: %w",
				d.Hostname, d.SandboxID, d.Port, sandpit.ErrHostnameConflict)
		}
		outcome = sandpit.AlreadyBound
	}
	if err := tx.Commit(); err != nil {
		return sandpit.CustomDomain{}, 0, fmt.Errorf("add custom domain %s: commit: %w", d.Hostname, err)
	}
	return row, outcome, nil
}

// GetCustomDomain returns the binding of hostname, or ErrNotFound.
func (s *Store) GetCustomDomain(ctx context.Context, hostname string) (sandpit.CustomDomain, error) {
	d, err := scanDomain(s.queryRow(ctx, nil, qDomainByHostname, hostname))
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.CustomDomain{}, fmt.Errorf("get custom domain %s: %w", hostname, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.CustomDomain{}, fmt.Errorf("get custom domain %s: %w", hostname, err)
	}
	return d, nil
}

// RemoveCustomDomain unbinds hostname from sandboxID. It returns ErrNotFound
// when hostname is not bound to that sandbox, so one sandbox can never remove
// another's domain.
func (s *Store) RemoveCustomDomain(ctx context.Context, sandboxID, hostname string) error {
	res, err := s.db.ExecContext(ctx,
		`DELETE FROM sandbox_custom_domains WHERE hostname = ? AND sandbox_id = ?`, hostname, sandboxID)
	if err != nil {
		return fmt.Errorf("remove custom domain %s from %s: %w", hostname, sandboxID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("remove custom domain %s from %s: %w", hostname, sandboxID, err)
	}
	if n == 0 {
		return fmt.Errorf("remove custom domain %s from %s: %w", hostname, sandboxID, sandpit.ErrNotFound)
	}
	return nil
}

// ListCustomDomains returns the domains bound to sandboxID, by hostname.
func (s *Store) ListCustomDomains(ctx context.Context, sandboxID string) ([]sandpit.CustomDomain, error) {
	return s.queryDomains(ctx, "list custom domains of "+sandboxID,
		`SELECT `+domainColumns+` FROM sandbox_custom_domains WHERE sandbox_id = ? ORDER BY hostname`, sandboxID)
}

// ListAllCustomDomains returns every binding, by hostname, for rebuilding
// routes after a restart.
func (s *Store) ListAllCustomDomains(ctx context.Context) ([]sandpit.CustomDomain, error) {
	return s.queryDomains(ctx, "list all custom domains",
		`SELECT `+domainColumns+` FROM sandbox_custom_domains ORDER BY hostname`)
}

func (s *Store) queryDomains(ctx context.Context, what, q string, args ...any) ([]sandpit.CustomDomain, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []sandpit.CustomDomain
	for rows.Next() {
		d, err := scanDomain(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

func scanDomain(r rowScanner) (sandpit.CustomDomain, error) {
	var (
		d       sandpit.CustomDomain
		created int64
	)
	if err := r.Scan(&d.Hostname, &d.SandboxID, &d.Port, &created); err != nil {
		return sandpit.CustomDomain{}, err
	}
	d.CreatedAt = fromNanos(created)
	return d, nil
}
