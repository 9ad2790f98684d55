package store

import (
	"context"
	"fmt"

	"github.com/sandpit-dev/sandpit"
)

// CountSandboxesByState returns how many sandboxes are in each state, for
// the metrics endpoint. It reads one aggregate row per state, so a scrape
// costs the same however many sandboxes there are.
func (s *Store) CountSandboxesByState(ctx context.Context) (map[sandpit.State]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT state, COUNT(*) FROM sandboxes GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count sandboxes: %w", err)
	}
	defer rows.Close()
	out := map[sandpit.State]int{}
	for rows.Next() {
		var (
			st sandpit.State
			n  int
		)
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("count sandboxes: %w", err)
		}
		out[st] = n
	}
	return out, rows.Err()
}

// Dir is the data directory the store holds.
func (s *Store) Dir() string { return s.dir }
