package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// randomCandidates is how many random host ports AllocateHostPort tries before
// it falls back to a linear scan. Random probes keep concurrent allocators from
// all colliding on the low end of the range; the scan guarantees that a free
// port is found if there is one.
const randomCandidates = 4

const portColumns = `sandbox_id, port, protocol, host_port, public_url, created_at`

const (
	// qPortInsert is the spec's single INSERT OR IGNORE. It inserts nothing
	// when either the (sandbox_id, port) primary key or the host-port partial
	// unique index already holds the value.
	qPortInsert = `INSERT OR IGNORE INTO exposed_ports (` + portColumns + `) VALUES (?, ?, ?, ?, ?, ?)`
	qPortByKey  = `SELECT ` + portColumns + ` FROM exposed_ports WHERE sandbox_id = ? AND port = ?`
)

func validatePort(p sandpit.ExposedPort) error {
	if p.SandboxID == "" {
		return errors.New("sandbox id must not be empty")
	}
	if p.Port < 1 || p.Port > 65535 {
		return fmt.Errorf("port %d out of range 1-65535", p.Port)
	}
	if p.HostPort < 0 || p.HostPort > 65535 {
		return fmt.Errorf("host port %d out of range 0-65535", p.HostPort)
	}
	return nil
}

// TryReserveHostPort records the exposure p, proposing p.HostPort as its host
// port (0 for exposures that need none, such as HTTP previews), and reports
// one of three outcomes:
//
//   - Reserved: this call inserted the row; the caller owns the exposure and
//     must undo it if a later step (installing the route) fails.
//   - Existing: (sandbox_id, port) was already exposed, by an earlier attempt
//     of this very request or by a concurrent one. Row is that exposure, with
//     whatever host port it holds, which need not be the candidate. It is not
//     the caller's to undo.
//   - Taken: another exposure holds the candidate host port; try another.
//
// A single INSERT OR IGNORE cannot tell the last two apart: both the
// (sandbox_id, port) primary key and the host-port partial unique index make
// it insert nothing. If both were reported as "taken", retrying an expose that
// already succeeded would make the allocator reject every candidate in turn,
// because the retry can never insert its own (sandbox_id, port) again, and it
// would end by reporting the pool exhausted while the exposure exists. The
// SELECT by (sandbox_id, port) after the insert is what separates "this
// exposure exists" from "this host port belongs to someone else".
//
// The sandbox must exist; otherwise the foreign key fails (OR IGNORE does not
// cover foreign keys) and the error wraps ErrNotFound.
func (s *Store) TryReserveHostPort(ctx context.Context, p sandpit.ExposedPort, now time.Time) (sandpit.ReserveResult, error) {
	if err := validatePort(p); err != nil {
		// OR IGNORE would also swallow a CHECK failure and make a bad port
		// look Taken, so bad input is rejected before the insert.
		return sandpit.ReserveResult{}, fmt.Errorf("reserve host port: %w", err)
	}
	now = clock(now)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return sandpit.ReserveResult{}, fmt.Errorf("reserve host port %d for %s:%d: %w", p.HostPort, p.SandboxID, p.Port, err)
	}
	defer rollback(tx)

	res, err := s.exec(ctx, tx, qPortInsert,
		p.SandboxID, p.Port, p.Protocol, p.HostPort, p.PublicURL, toNanos(now))
	if err != nil {
		if isForeignKeyViolation(err) {
			return sandpit.ReserveResult{}, fmt.Errorf("reserve host port for %s:%d: sandbox %s: %w", p.SandboxID, p.Port, p.SandboxID, sandpit.ErrNotFound)
		}
		return sandpit.ReserveResult{}, fmt.Errorf("reserve host port %d for %s:%d: %w", p.HostPort, p.SandboxID, p.Port, err)
	}
	inserted, err := res.RowsAffected()
	if err != nil {
		return sandpit.ReserveResult{}, fmt.Errorf("reserve host port %d for %s:%d: %w", p.HostPort, p.SandboxID, p.Port, err)
	}
	row, err := scanPort(s.queryRow(ctx, tx, qPortByKey, p.SandboxID, p.Port))
	var out sandpit.ReserveResult
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Nothing inserted and no exposure of ours: the host port is owned by
		// another exposure.
		out = sandpit.ReserveResult{Outcome: sandpit.Taken}
	case err != nil:
		return sandpit.ReserveResult{}, fmt.Errorf("reserve host port %d for %s:%d: read back: %w", p.HostPort, p.SandboxID, p.Port, err)
	case inserted == 1:
		out = sandpit.ReserveResult{Outcome: sandpit.Reserved, Row: row}
	default:
		out = sandpit.ReserveResult{Outcome: sandpit.Existing, Row: row}
	}
	if err := tx.Commit(); err != nil {
		return sandpit.ReserveResult{}, fmt.Errorf("reserve host port %d for %s:%d: commit: %w", p.HostPort, p.SandboxID, p.Port, err)
	}
	return out, nil
}

// AllocateHostPort exposes (p.SandboxID, p.Port) on a host port from pool. It
// tries a few random candidates and then scans the whole range, one
// TryReserveHostPort per candidate, with PublicURL set to urlFor(candidate)
// when urlFor is not nil. reused is false when this call created the exposure
// and true when it already existed; only a caller that got reused == false
// may roll the exposure back. Because an existing exposure answers Existing
// whatever the candidate, a retry returns on its first candidate and never
// walks the pool. When every port in the range is taken the error wraps
// ErrPortPoolExhausted.
func (s *Store) AllocateHostPort(ctx context.Context, p sandpit.ExposedPort, pool sandpit.PortRange, urlFor func(hostPort int) string, now time.Time) (row sandpit.ExposedPort, reused bool, err error) {
	if pool.Lo < 1 || pool.Hi > 65535 || pool.Lo > pool.Hi {
		return sandpit.ExposedPort{}, false, fmt.Errorf("allocate host port for %s:%d: invalid range %d-%d", p.SandboxID, p.Port, pool.Lo, pool.Hi)
	}
	try := func(hostPort int) (sandpit.ReserveResult, error) {
		c := p
		c.HostPort = hostPort
		if urlFor != nil {
			c.PublicURL = urlFor(hostPort)
		}
		return s.TryReserveHostPort(ctx, c, now)
	}
	size := pool.Size()
	tried := make(map[int]bool, randomCandidates)
	for i := 0; i < randomCandidates && i < size; i++ {
		hp := pool.Lo + rand.IntN(size)
		if tried[hp] {
			continue
		}
		tried[hp] = true
		res, err := try(hp)
		if err != nil {
			return sandpit.ExposedPort{}, false, fmt.Errorf("allocate host port: %w", err)
		}
		switch res.Outcome {
		case sandpit.Reserved:
			return res.Row, false, nil
		case sandpit.Existing:
			return res.Row, true, nil
		}
	}
	// The scan starts at a random offset so that concurrent allocators that
	// reach it do not all fight over the same next port.
	start := rand.IntN(size)
	for i := range size {
		hp := pool.Lo + (start+i)%size
		if tried[hp] {
			continue
		}
		res, err := try(hp)
		if err != nil {
			return sandpit.ExposedPort{}, false, fmt.Errorf("allocate host port: %w", err)
		}
		switch res.Outcome {
		case sandpit.Reserved:
			return res.Row, false, nil
		case sandpit.Existing:
			return res.Row, true, nil
		}
	}
	return sandpit.ExposedPort{}, false, fmt.Errorf("allocate host port for %s:%d: every port in %d-%d is taken: %w",
		p.SandboxID, p.Port, pool.Lo, pool.Hi, sandpit.ErrPortPoolExhausted)
}

// GetPort returns the exposure of (sandboxID, port), or ErrNotFound.
func (s *Store) GetPort(ctx context.Context, sandboxID string, port int) (sandpit.ExposedPort, error) {
	row, err := scanPort(s.queryRow(ctx, nil, qPortByKey, sandboxID, port))
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.ExposedPort{}, fmt.Errorf("get port %s:%d: %w", sandboxID, port, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.ExposedPort{}, fmt.Errorf("get port %s:%d: %w", sandboxID, port, err)
	}
	return row, nil
}

// ListPorts returns a sandbox's exposures ordered by port.
func (s *Store) ListPorts(ctx context.Context, sandboxID string) ([]sandpit.ExposedPort, error) {
	return s.queryPorts(ctx, "list ports of "+sandboxID,
		`SELECT `+portColumns+` FROM exposed_ports WHERE sandbox_id = ? ORDER BY port`, sandboxID)
}

// ListAllPorts returns every exposure, ordered by sandbox and port, for
// rebuilding routes after a restart.
func (s *Store) ListAllPorts(ctx context.Context) ([]sandpit.ExposedPort, error) {
	return s.queryPorts(ctx, "list all ports",
		`SELECT `+portColumns+` FROM exposed_ports ORDER BY sandbox_id, port`)
}

func (s *Store) queryPorts(ctx context.Context, what, q string, args ...any) ([]sandpit.ExposedPort, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []sandpit.ExposedPort
	for rows.Next() {
		p, err := scanPort(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// DeletePort removes the exposure of (sandboxID, port), or returns
// ErrNotFound.
func (s *Store) DeletePort(ctx context.Context, sandboxID string, port int) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM exposed_ports WHERE sandbox_id = ? AND port = ?`, sandboxID, port)
	if err != nil {
		return fmt.Errorf("delete port %s:%d: %w", sandboxID, port, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete port %s:%d: %w", sandboxID, port, err)
	}
	if n == 0 {
		return fmt.Errorf("delete port %s:%d: %w", sandboxID, port, sandpit.ErrNotFound)
	}
	return nil
}

// CountHostPortsInRange returns how many host ports in r are bound, for
// metrics and tests.
func (s *Store) CountHostPortsInRange(ctx context.Context, r sandpit.PortRange) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx,
		`SELECT COUNT(*) FROM exposed_ports WHERE host_port > 0 AND host_port BETWEEN ? AND ?`, r.Lo, r.Hi).Scan(&n); err != nil {
		return 0, fmt.Errorf("count host ports in %d-%d: %w", r.Lo, r.Hi, err)
	}
	return n, nil
}

func scanPort(r rowScanner) (sandpit.ExposedPort, error) {
	var (
		p       sandpit.ExposedPort
		created int64
	)
	if err := r.Scan(&p.SandboxID, &p.Port, &p.Protocol, &p.HostPort, &p.PublicURL, &created); err != nil {
		return sandpit.ExposedPort{}, err
	}
	p.CreatedAt = fromNanos(created)
	return p, nil
}
