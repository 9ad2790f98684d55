package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
)

const volumeColumns = `id, owner, name, engine_name, state, node, created_at, updated_at, size_mb`

// CreateVolume inserts v (in the state it carries, creating for a new
// volume) unless the owner already has a volume of that non-empty name,
// which it then returns with AlreadyBound: a retried or racing create of one
// name lands on one row, decided by the partial unique index rather than by
// a lookup that could race.
func (s *Store) CreateVolume(ctx context.Context, v sandpit.Volume, now time.Time) (sandpit.Volume, sandpit.AddOutcome, error) {
	if v.ID == "" || v.Owner == "" || v.EngineName == "" {
		return sandpit.Volume{}, 0, errors.New("create volume: id, owner and engine name must not be empty")
	}
	if v.State == "" {
		v.State = sandpit.VolumeCreating
	}
	at := toNanos(clock(now))
	_, err := s.db.ExecContext(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (?,?,?,?,?,?,?,?,?)`,
		v.ID, v.Owner, v.Name, v.EngineName, string(v.State), v.Node, at, at, v.SizeMB)
	switch {
	case err == nil:
		got, err := s.GetVolume(ctx, v.ID)
		return got, sandpit.Added, err
	case isUniqueViolation(err) && v.Name != "":
		got, err := s.GetVolumeByName(ctx, v.Owner, v.Name)
		if errors.Is(err, sandpit.ErrNotFound) {
			// The holder of the name went between the insert and the
			// lookup (a delete finished): the caller may try again.
			return sandpit.Volume{}, 0, fmt.Errorf("create volume %q: %w", v.Name, sandpit.ErrNameConflict)
		}
		return got, sandpit.AlreadyBound, err
	case isPrimaryKeyViolation(err) || isUniqueViolation(err):
		return sandpit.Volume{}, 0, fmt.Errorf("create volume %s: %w", v.ID, sandpit.ErrSandboxExists)
	default:
		return sandpit.Volume{}, 0, fmt.Errorf("create volume %s: %w", v.ID, err)
	}
}

// GetVolume returns the volume with the id, or ErrNotFound.
func (s *Store) GetVolume(ctx context.Context, id string) (sandpit.Volume, error) {
	return s.oneVolume(ctx, "get volume "+id, `SELECT `+volumeColumns+` FROM volumes WHERE id = ?`, id)
}

// GetVolumeByName returns the owner's volume of that name, or ErrNotFound.
func (s *Store) GetVolumeByName(ctx context.Context, owner, name string) (sandpit.Volume, error) {
	if name == "" {
		return sandpit.Volume{}, fmt.Errorf("get volume by empty name: %w", sandpit.ErrNotFound)
	}
	return s.oneVolume(ctx, fmt.Sprintf("get volume %q of %s", name, owner),
		`SELECT `+volumeColumns+` FROM volumes WHERE owner = ? AND name = ?`, owner, name)
}

func (s *Store) oneVolume(ctx context.Context, what, q string, args ...any) (sandpit.Volume, error) {
	v, err := scanVolume(s.db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.Volume{}, fmt.Errorf("%s: %w", what, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.Volume{}, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// ListVolumes returns the owner's volumes ("" = every owner's) in the given
// states (none = all), by creation.
func (s *Store) ListVolumes(ctx context.Context, owner string, states ...sandpit.VolumeState) ([]sandpit.Volume, error) {
	q := `SELECT ` + volumeColumns + ` FROM volumes`
	var where []string
	var args []any
	if owner != "" {
		where = append(where, `owner = ?`)
		args = append(args, owner)
	}
	if len(states) > 0 {
		where = append(where, `state IN (?`+strings.Repeat(`, ?`, len(states)-1)+`)`)
		for _, st := range states {
			args = append(args, string(st))
		}
	}
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	return queryAll(ctx, s.db, "list volumes", scanVolume, q+` ORDER BY created_at, id`, args...)
}

// MarkVolumeReady moves a creating volume to ready once its engine volume
// exists. A volume already ready is not an error: concurrent finishers of
// one create all succeed.
func (s *Store) MarkVolumeReady(ctx context.Context, id string, now time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE volumes SET state = 'ready', updated_at = ? WHERE id = ? AND state IN ('creating', 'ready')`,
		toNanos(clock(now)), id)
	if err != nil {
		return fmt.Errorf("mark volume %s ready: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("mark volume %s ready: %w", id, sandpit.ErrVolumeNotReady)
	}
	return nil
}

// MarkVolumeDeleting decides a delete: the volume becomes deleting only
// while no sandbox row mounts it, in one statement on the single writer, so
// a create mounting it cannot slip in between the check and the change (the
// create's mount insert requires the volume to be ready). A volume already
// deleting is returned as it is, so a retried delete finishes the first.
func (s *Store) MarkVolumeDeleting(ctx context.Context, id string, now time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE volumes SET state = 'deleting', updated_at = ?
		WHERE id = ? AND state IN ('ready', 'creating', 'deleting')
		AND NOT EXISTS (SELECT 1 FROM sandbox_volumes WHERE volume_id = volumes.id)`, toNanos(clock(now)), id)
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		return nil
	}
	if _, err := s.GetVolume(ctx, id); err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	return fmt.Errorf("delete volume %s: %w", id, sandpit.ErrVolumeInUse)
}

// DeleteVolumeRow removes the volume's row once its engine volume is gone.
// A mount the schema still sees refuses it with ErrVolumeInUse.
func (s *Store) DeleteVolumeRow(ctx context.Context, id string) error {
	err := s.updateOne(ctx, "delete volume "+id, `DELETE FROM volumes WHERE id = ?`, id)
	if err != nil && !errors.Is(err, sandpit.ErrNotFound) {
		// RESTRICT reports itself with a code of its own (not the
		// foreign key's), so the mounts are asked directly.
		if ms, merr := s.VolumeMounts(ctx, id); merr == nil && len(ms) > 0 {
			return fmt.Errorf("delete volume %s: %w", id, sandpit.ErrVolumeInUse)
		}
	}
	return err
}

// VolumeMounts returns the mounts of the volume: the ids of the sandboxes
// that mount it.
func (s *Store) VolumeMounts(ctx context.Context, volumeID string) ([]string, error) {
	return queryAll(ctx, s.db, "mounts of volume "+volumeID, func(r rowScanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, `SELECT sandbox_id FROM sandbox_volumes WHERE volume_id = ? ORDER BY sandbox_id`, volumeID)
}

// SandboxMounts returns the volumes the sandbox mounts, by path, with each
// volume's name and engine name.
func (s *Store) SandboxMounts(ctx context.Context, sandboxID string) ([]sandpit.VolumeMount, error) {
	return queryAll(ctx, s.db, "mounts of sandbox "+sandboxID, scanMount,
		`SELECT m.volume_id, v.name, v.engine_name, v.size_mb, m.path, m.read_only
		FROM sandbox_volumes m JOIN volumes v ON v.id = m.volume_id
		WHERE m.sandbox_id = ? ORDER BY m.path`, sandboxID)
}

// insertMounts writes the sandbox's mounts in its create transaction. Each
// volume must exist, belong to the sandbox's owner and be ready at that
// moment: the check is the insert itself, so a delete deciding at the same
// time either sees the mount or makes the insert find nothing.
func insertMounts(ctx context.Context, tx *sql.Tx, owner string, sb sandpit.Sandbox) error {
	for _, m := range sb.Volumes {
		ro := 0
		if m.ReadOnly {
			ro = 1
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO sandbox_volumes (sandbox_id, volume_id, path, read_only)
			SELECT ?, id, ?, ? FROM volumes WHERE id = ? AND owner = ? AND state = 'ready'`,
			sb.ID, m.Path, ro, m.VolumeID, owner)
		if err != nil {
			return fmt.Errorf("mount volume %s at %s: %w", m.VolumeID, m.Path, err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			var state string
			err := tx.QueryRowContext(ctx, `SELECT state FROM volumes WHERE id = ? AND owner = ?`, m.VolumeID, owner).Scan(&state)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("volume %s: %w", m.VolumeID, sandpit.ErrNotFound)
			}
			return fmt.Errorf("volume %s is %s: %w", m.VolumeID, state, sandpit.ErrVolumeNotReady)
		}
	}
	return nil
}

func scanVolume(r rowScanner) (sandpit.Volume, error) {
	var (
		v                sandpit.Volume
		state            string
		created, updated int64
	)
	if err := r.Scan(&v.ID, &v.Owner, &v.Name, &v.EngineName, &state, &v.Node, &created, &updated, &v.SizeMB); err != nil {
		return sandpit.Volume{}, err
	}
	v.State = sandpit.VolumeState(state)
	v.CreatedAt, v.UpdatedAt = fromNanos(created), fromNanos(updated)
	return v, nil
}

func scanMount(r rowScanner) (sandpit.VolumeMount, error) {
	var (
		m  sandpit.VolumeMount
		ro int
	)
	if err := r.Scan(&m.VolumeID, &m.VolumeName, &m.EngineName, &m.SizeMB, &m.Path, &ro); err != nil {
		return sandpit.VolumeMount{}, err
	}
	m.ReadOnly = ro != 0
	return m, nil
}
