package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit"
)

// The store's sandbox errors are the domain's; these names keep the store's
// callers and tests readable.
var (
	ErrSandboxExists    = sandpit.ErrSandboxExists
	ErrInvalidPageToken = sandpit.ErrInvalidPageToken
)

const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

const sandboxColumns = `id, name, image, template, state, labels, env, cpu, memory_mb,
	container_id, access_token, end_at, created_at, updated_at, owner, state_reason, port_access, traffic_token, network,
	disk_mb, auto_stop_minutes, auto_archive_minutes, auto_delete_minutes, last_activity_at, stopped_at,
	pause_mode, on_timeout, pause_keep_memory, auto_resume, archive_image, timeout_seconds`

const (
	qSandboxInsert = `INSERT INTO sandboxes (` + sandboxColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// qSandboxInsertCapped inserts only while the table holds fewer
	// counted rows than the last argument. The count and the insert are one
	// statement on the single writer connection, so concurrent creates
	// cannot both take the last slot. Paused sandboxes are not counted: they
	// run nothing until resumed.
	qSandboxInsertCapped = `INSERT INTO sandboxes (` + sandboxColumns + `)
		SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
		WHERE (SELECT COUNT(*) FROM sandboxes WHERE ` + countedForCap + `) < ?`
	// countedForCap selects the rows --max-sandboxes counts.
	countedForCap = `state <> 'paused'`
	qSandboxByID  = `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE id = ?`
)

// CreateSandbox inserts a new sandbox row. A duplicate non-empty name fails
// with ErrNameConflict and a duplicate id with ErrSandboxExists; both are
// decided by the schema's unique indexes, not by a prior lookup. A zero
// CreatedAt means now; a zero UpdatedAt means CreatedAt. An empty Owner is
// the admin owner.
func (s *Store) CreateSandbox(ctx context.Context, sb sandpit.Sandbox) error {
	return s.CreateSandboxWithinLimits(ctx, sb, sandpit.OwnerLimits{}, 0)
}

// CreateSandboxWithinLimits is CreateSandbox under quotas: the owner's
// limits, and maxRows, the most sandboxes (any state, any owner) the daemon
// holds (<= 0: no cap). Usage is read and the row inserted in one statement
// or one write transaction on the single writer, so two creates racing for
// the last slot cannot both win. A create that would pass a limit fails
// with ErrQuotaExceeded naming it, and inserts nothing.
func (s *Store) CreateSandboxWithinLimits(ctx context.Context, sb sandpit.Sandbox, limits sandpit.OwnerLimits, maxRows int) error {
	if sb.ID == "" {
		return errors.New("create sandbox: id must not be empty")
	}
	labels, err := encodeMap(sb.Labels)
	if err != nil {
		return fmt.Errorf("create sandbox %s: labels: %w", sb.ID, err)
	}
	env, err := encodeMap(sb.Env)
	if err != nil {
		return fmt.Errorf("create sandbox %s: env: %w", sb.ID, err)
	}
	netPolicy, err := encodeNetwork(sb.Network)
	if err != nil {
		return fmt.Errorf("create sandbox %s: network: %w", sb.ID, err)
	}
	created := clock(sb.CreatedAt)
	updated := sb.UpdatedAt
	if updated.IsZero() {
		updated = created
	}
	owner := sb.Owner
	if owner == "" {
		owner = sandpit.AdminOwner
	}
	access := sb.PortAccess
	if access == "" {
		access = sandpit.PortAccessExposed
	}
	args := []any{sb.ID, sb.Name, sb.Image, sb.Template, sb.State, labels, env, sb.CPU, sb.MemoryMB,
		sb.ContainerID, sb.AccessToken, nullableNanos(sb.EndAt), toNanos(created), toNanos(updated), owner, sb.StateReason,
		string(access), sb.TrafficToken, netPolicy,
		sb.DiskMB, sb.AutoStop, sb.AutoArchive, sb.AutoDelete, nullableNanos(sb.LastActivityAt), nullableNanos(sb.StoppedAt),
		string(sb.PauseMode), string(sb.TimeoutAction()), sb.KeepMemory, sb.AutoResume, sb.ArchiveImage, int64(sb.Timeout / time.Second)}
	var res sql.Result
	switch {
	case !limits.Unlimited() || len(sb.Volumes) > 0:
		// Mounts are written in the sandbox row's transaction, so a
		// sandbox never exists without them.
		err = s.insertWithinLimits(ctx, owner, sb, limits, maxRows, args)
	case maxRows > 0:
		res, err = s.exec(ctx, nil, qSandboxInsertCapped, append(args, maxRows)...)
	default:
		res, err = s.exec(ctx, nil, qSandboxInsert, args...)
	}
	switch {
	case errors.Is(err, sandpit.ErrQuotaExceeded), errors.Is(err, sandpit.ErrNotFound), errors.Is(err, sandpit.ErrVolumeNotReady):
		return fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	case err == nil:
		if res != nil {
			if n, rerr := res.RowsAffected(); rerr == nil && n == 0 {
				return fmt.Errorf("create sandbox %s: at most %d sandboxes: %w", sb.ID, maxRows, sandpit.ErrQuotaExceeded)
			}
		}
		s.index.put(sb.ID, sb.AccessToken, sb.State)
		return nil
	case isUniqueViolation(err):
		// The only UNIQUE index on sandboxes besides the primary key is
		// idx_sandboxes_name; the primary key reports its own code.
		return s.nameTaken(ctx, owner, sb.Name)
	case isPrimaryKeyViolation(err):
		return fmt.Errorf("create sandbox %s: %w", sb.ID, ErrSandboxExists)
	default:
		return fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
}

// nameTaken is the conflict of a create whose name another sandbox holds.
// It names that sandbox (the new one never existed) when it is the same
// owner's; another owner's sandbox is not disclosed.
func (s *Store) nameTaken(ctx context.Context, owner, name string) error {
	holder, err := s.GetSandboxByName(ctx, name)
	switch {
	case err != nil:
		// Removed since the insert failed: the name is free again.
		return fmt.Errorf("%w: %q was taken by another sandbox", sandpit.ErrNameConflict, name)
	case holder.Owner == owner || holder.Owner == "" && owner == sandpit.AdminOwner:
		return fmt.Errorf("%w: %q is the name of sandbox %s", sandpit.ErrNameConflict, name, holder.ID)
	default:
		return fmt.Errorf("%w: %q is the name of another owner's sandbox", sandpit.ErrNameConflict, name)
	}
}

// GetSandbox returns the sandbox with the given id, or ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id string) (sandpit.Sandbox, error) {
	row := s.queryRow(ctx, nil, qSandboxByID, id)
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// GetSandboxByName returns the sandbox with the given non-empty name, or
// ErrNotFound.
func (s *Store) GetSandboxByName(ctx context.Context, name string) (sandpit.Sandbox, error) {
	if name == "" {
		// Unnamed sandboxes share the empty name, so it identifies nothing.
		return sandpit.Sandbox{}, fmt.Errorf("get sandbox by empty name: %w", sandpit.ErrNotFound)
	}
	row := s.db.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE name = ?`, name)
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.Sandbox{}, fmt.Errorf("get sandbox by name %q: %w", name, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.Sandbox{}, fmt.Errorf("get sandbox by name %q: %w", name, err)
	}
	return sb, nil
}

// ListSandboxes returns one page of sandboxes ordered by (created_at, id) and
// the token for the next page, which is empty on the last page. Rows created
// or deleted between pages neither shift nor repeat the rows already returned,
// because the token records the position of the last row rather than an
// offset.
func (s *Store) ListSandboxes(ctx context.Context, opts sandpit.ListOptions) ([]sandpit.Sandbox, string, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	if limit > maxListLimit {
		limit = maxListLimit
	}

	var where []string
	var args []any
	if opts.PageToken != "" {
		created, id, err := decodePageToken(opts.PageToken)
		if err != nil {
			return nil, "", fmt.Errorf("list sandboxes: %w", err)
		}
		if opts.Descending {
			where = append(where, `(created_at, id) < (?, ?)`)
		} else {
			where = append(where, `(created_at, id) > (?, ?)`)
		}
		args = append(args, created, id)
	}
	if opts.Owner != "" {
		where = append(where, `owner = ?`)
		args = append(args, opts.Owner)
	}
	if len(opts.States) > 0 {
		where = append(where, `state IN (?`+strings.Repeat(`, ?`, len(opts.States)-1)+`)`)
		for _, st := range opts.States {
			args = append(args, st)
		}
	}
	// Label keys are matched through json_each rather than json_extract:
	// a json_extract path cannot quote a key that itself contains '"', while
	// json_each compares keys as plain strings. Keys are sorted only to keep
	// the generated SQL deterministic.
	keys := make([]string, 0, len(opts.Labels))
	for k := range opts.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		where = append(where, `EXISTS (SELECT 1 FROM json_each(sandboxes.labels) AS l
			WHERE l.key = ? AND l.type = 'text' AND l.value = ?)`)
		args = append(args, k, opts.Labels[k])
	}

	q := `SELECT ` + sandboxColumns + ` FROM sandboxes`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	// One extra row tells us whether another page exists.
	if opts.Descending {
		q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	} else {
		q += ` ORDER BY created_at, id LIMIT ?`
	}
	args = append(args, limit+1)

	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	out := make([]sandpit.Sandbox, 0, limit)
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = encodePageToken(toNanos(last.CreatedAt), last.ID)
	}
	return out, next, nil
}

// UpdateSandboxState sets the sandbox's state and clears its reason, or
// returns ErrNotFound.
func (s *Store) UpdateSandboxState(ctx context.Context, id string, state sandpit.State, now time.Time) error {
	return s.SetSandboxState(ctx, id, state, "", now)
}

// SetSandboxState sets the sandbox's state with the reason it is in it
// ("" for none), or returns ErrNotFound. Stopping records when (auto-delete
// and auto-archive count from then); starting clears that and counts as
// activity, so that auto-stop measures idleness from the start rather than
// from before the stop. A paused state is a memory pause; SetSandboxPaused
// names another mode.
func (s *Store) SetSandboxState(ctx context.Context, id string, state sandpit.State, reason string, now time.Time) error {
	return s.SetSandboxStateMode(ctx, id, state, sandpit.PauseMemory, reason, now)
}

// SetSandboxStateMode is SetSandboxState with the pause mode a paused state
// has; any other state clears the mode. State and mode are one write, so no
// reader sees a paused row without its mode.
func (s *Store) SetSandboxStateMode(ctx context.Context, id string, state sandpit.State, mode sandpit.PauseMode, reason string, now time.Time) (err error) {
	defer func() {
		if err == nil {
			s.index.setState(id, state)
		}
	}()
	if state != sandpit.StatePaused {
		mode = sandpit.PauseNone
	} else if mode == sandpit.PauseNone {
		mode = sandpit.PauseMemory
	}
	return s.updateSandbox(ctx, "update state of sandbox", id,
		`UPDATE sandboxes SET state = ?1, state_reason = ?2, updated_at = ?3,
			stopped_at = CASE WHEN ?1 = 'stopped' THEN COALESCE(stopped_at, ?3) ELSE NULL END,
			last_activity_at = CASE WHEN ?1 = 'running' AND state <> 'running' THEN ?3 ELSE last_activity_at END,
			pause_mode = ?5
		WHERE id = ?4`,
		string(state), reason, toNanos(clock(now)), id, string(mode))
}

// SetSandboxArchiveImage records (or, with "", clears) the image an
// archived sandbox's filesystem was committed to.
func (s *Store) SetSandboxArchiveImage(ctx context.Context, id, image string, now time.Time) error {
	return s.updateSandbox(ctx, "set archive image of sandbox", id,
		`UPDATE sandboxes SET archive_image = ?, updated_at = ? WHERE id = ?`,
		image, toNanos(clock(now)), id)
}

// SetSandboxInterval sets one lifecycle interval of a sandbox. The caller
// validates the value; the schema's CHECKs are the second line of defence.
func (s *Store) SetSandboxInterval(ctx context.Context, id string, which sandpit.Interval, value int, now time.Time) error {
	var col string
	switch which {
	case sandpit.IntervalAutoStop:
		col = "auto_stop_minutes"
	case sandpit.IntervalAutoArchive:
		col = "auto_archive_minutes"
	case sandpit.IntervalAutoDelete:
		col = "auto_delete_minutes"
	default:
		return fmt.Errorf("set interval of sandbox %s: unknown interval %q", id, which)
	}
	return s.updateSandbox(ctx, "set "+string(which)+" of sandbox", id,
		`UPDATE sandboxes SET `+col+` = ?, updated_at = ? WHERE id = ?`,
		value, toNanos(clock(now)), id)
}

// TouchSandbox records activity at the given time. It never moves the
// recorded activity backwards, so concurrent touches need no ordering, and
// it does not change updated_at: activity is not a change of the sandbox.
func (s *Store) TouchSandbox(ctx context.Context, id string, at time.Time) error {
	// A name that is no sandbox (a preview host can say anything) is
	// answered from memory: it costs no write transaction.
	if !s.SandboxKnown(id) {
		return fmt.Errorf("touch sandbox %s: %w", id, sandpit.ErrNotFound)
	}
	n := toNanos(clock(at))
	s.activity.n.Add(1)
	res, err := s.db.ExecContext(ctx,
		`UPDATE sandboxes SET last_activity_at = MAX(COALESCE(last_activity_at, 0), ?) WHERE id = ?`, n, id)
	if err != nil {
		return fmt.Errorf("touch sandbox %s: %w", id, err)
	}
	if k, err := res.RowsAffected(); err == nil && k == 0 {
		return fmt.Errorf("touch sandbox %s: %w", id, sandpit.ErrNotFound)
	}
	return nil
}

// ListLifecycleDue returns the sandboxes whose lifecycle interval has run
// out at now, with intervals counted in unit: running sandboxes idle for
// their auto-stop interval, and stopped sandboxes stopped for their
// auto-delete or (not yet archived) auto-archive interval. The caller tells
// them apart by state and interval.
func (s *Store) ListLifecycleDue(ctx context.Context, now time.Time, unit time.Duration) ([]sandpit.Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT `+sandboxColumns+` FROM sandboxes
		WHERE (auto_stop_minutes > 0 AND state = 'running'
		       AND MAX(COALESCE(last_activity_at, 0), created_at) + auto_stop_minutes * ?2 <= ?1)
		   OR (auto_delete_minutes >= 0 AND state = 'stopped' AND stopped_at IS NOT NULL
		       AND stopped_at + auto_delete_minutes * ?2 <= ?1)
		   OR (auto_archive_minutes > 0 AND state = 'stopped' AND state_reason <> 'archived' AND stopped_at IS NOT NULL
		       AND stopped_at + auto_archive_minutes * ?2 <= ?1)
		ORDER BY created_at, id`, toNanos(clock(now)), int64(unit))
	if err != nil {
		return nil, fmt.Errorf("list sandboxes due for their lifecycle: %w", err)
	}
	out, err := scanSandboxes(rows)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes due for their lifecycle: %w", err)
	}
	return out, nil
}

// SetSandboxEndAt sets the sandbox's deadline; the zero time clears it.
func (s *Store) SetSandboxEndAt(ctx context.Context, id string, endAt time.Time, now time.Time) error {
	return s.updateSandbox(ctx, "set end_at of sandbox", id,
		`UPDATE sandboxes SET end_at = ?, updated_at = ? WHERE id = ?`,
		nullableNanos(endAt), toNanos(clock(now)), id)
}

// SetSandboxLabels replaces the sandbox's labels.
func (s *Store) SetSandboxLabels(ctx context.Context, id string, labels map[string]string, now time.Time) error {
	enc, err := encodeMap(labels)
	if err != nil {
		return fmt.Errorf("set labels of sandbox %s: %w", id, err)
	}
	return s.updateSandbox(ctx, "set labels of sandbox", id,
		`UPDATE sandboxes SET labels = ?, updated_at = ? WHERE id = ?`,
		enc, toNanos(clock(now)), id)
}

// SetSandboxNetwork replaces the sandbox's egress policy.
func (s *Store) SetSandboxNetwork(ctx context.Context, id string, p sandpit.NetworkPolicy, now time.Time) error {
	enc, err := encodeNetwork(p)
	if err != nil {
		return fmt.Errorf("set network of sandbox %s: %w", id, err)
	}
	return s.updateSandbox(ctx, "set network of sandbox", id,
		`UPDATE sandboxes SET network = ?, updated_at = ? WHERE id = ?`,
		enc, toNanos(clock(now)), id)
}

// SetSandboxContainerID records the engine's container id once it is known.
func (s *Store) SetSandboxContainerID(ctx context.Context, id, containerID string, now time.Time) error {
	return s.updateSandbox(ctx, "set container id of sandbox", id,
		`UPDATE sandboxes SET container_id = ?, updated_at = ? WHERE id = ?`,
		containerID, toNanos(clock(now)), id)
}

func (s *Store) updateSandbox(ctx context.Context, what, id, q string, args ...any) error {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, id, err)
	}
	if n == 0 {
		return fmt.Errorf("%s %s: %w", what, id, sandpit.ErrNotFound)
	}
	return nil
}

// ListExpiredSandboxes returns the sandboxes whose deadline is at or before
// now, earliest deadline first.
func (s *Store) ListExpiredSandboxes(ctx context.Context, now time.Time) ([]sandpit.Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT `+sandboxColumns+` FROM sandboxes
		WHERE end_at IS NOT NULL AND end_at <= ?
		ORDER BY end_at, id`, toNanos(clock(now)))
	if err != nil {
		return nil, fmt.Errorf("list expired sandboxes: %w", err)
	}
	out, err := scanSandboxes(rows)
	if err != nil {
		return nil, fmt.Errorf("list expired sandboxes: %w", err)
	}
	return out, nil
}

// DeleteSandbox deletes the sandbox, or returns ErrNotFound. Its exposed ports
// and custom domains go with it (ON DELETE CASCADE), and its TAP slot, if any,
// returns to the pool.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	defer rollback(tx)
	// ON DELETE SET NULL would free the slot too, but it cannot also clear
	// allocated_at, so release the slot explicitly in the same transaction.
	if _, err := tx.ExecContext(ctx, `
		UPDATE firecracker_tap_pool SET sandbox_id = NULL, allocated_at = NULL
		WHERE sandbox_id = ?`, id); err != nil {
		return fmt.Errorf("delete sandbox %s: release tap slot: %w", id, err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("delete sandbox %s: %w", id, sandpit.ErrNotFound)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("delete sandbox %s: commit: %w", id, err)
	}
	s.index.remove(id)
	return nil
}

// rowScanner is satisfied by *sql.Row and *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// scanSandboxes reads every row and closes rows.
func scanSandboxes(rows *sql.Rows) ([]sandpit.Sandbox, error) {
	defer rows.Close()
	var out []sandpit.Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

func scanSandbox(r rowScanner) (sandpit.Sandbox, error) {
	var (
		sb                 sandpit.Sandbox
		labels, env, netw  string
		endAt              sql.NullInt64
		createdAt, updated int64
		activity, stopped  sql.NullInt64
		timeoutS           int64
	)
	if err := r.Scan(&sb.ID, &sb.Name, &sb.Image, &sb.Template, &sb.State, &labels, &env,
		&sb.CPU, &sb.MemoryMB, &sb.ContainerID, &sb.AccessToken, &endAt, &createdAt, &updated, &sb.Owner, &sb.StateReason,
		&sb.PortAccess, &sb.TrafficToken, &netw,
		&sb.DiskMB, &sb.AutoStop, &sb.AutoArchive, &sb.AutoDelete, &activity, &stopped,
		&sb.PauseMode, &sb.OnTimeout, &sb.KeepMemory, &sb.AutoResume, &sb.ArchiveImage, &timeoutS); err != nil {
		return sandpit.Sandbox{}, err
	}
	var err error
	if sb.Labels, err = decodeMap(labels); err != nil {
		return sandpit.Sandbox{}, fmt.Errorf("sandbox %s: labels: %w", sb.ID, err)
	}
	if sb.Env, err = decodeMap(env); err != nil {
		return sandpit.Sandbox{}, fmt.Errorf("sandbox %s: env: %w", sb.ID, err)
	}
	if netw != "" && netw != "{}" {
		if err := json.Unmarshal([]byte(netw), &sb.Network); err != nil {
			return sandpit.Sandbox{}, fmt.Errorf("sandbox %s: network: %w", sb.ID, err)
		}
	}
	sb.EndAt = fromNullNanos(endAt)
	sb.CreatedAt = fromNanos(createdAt)
	sb.UpdatedAt = fromNanos(updated)
	sb.LastActivityAt = fromNullNanos(activity)
	sb.StoppedAt = fromNullNanos(stopped)
	sb.Timeout = time.Duration(timeoutS) * time.Second
	return sb, nil
}

// encodeNetwork stores the default policy as "{}". A host mask is kept
// whatever the egress rules: IsZero speaks of egress only.
func encodeNetwork(p sandpit.NetworkPolicy) (string, error) {
	if p.IsZero() && p.MaskRequestHost == "" {
		return "{}", nil
	}
	b, err := json.Marshal(p)
	return string(b), err
}

// encodeMap stores a nil map as "{}" so that it reads back as an empty map
// and json_each over it stays valid.
func encodeMap(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func decodeMap(s string) (map[string]string, error) {
	m := map[string]string{}
	if s == "" || s == "null" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]string{}
	}
	return m, nil
}

// Page tokens are "v1:<created_at ns>:<id>" in unpadded base64url. They are
// opaque to callers; the version prefix lets the format change later.
const pageTokenPrefix = "v1:"

func encodePageToken(created int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(pageTokenPrefix + strconv.FormatInt(created, 10) + ":" + id))
}

func decodePageToken(tok string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, "", fmt.Errorf("%w: not base64url", ErrInvalidPageToken)
	}
	rest, ok := strings.CutPrefix(string(raw), pageTokenPrefix)
	if !ok {
		return 0, "", fmt.Errorf("%w: unknown version", ErrInvalidPageToken)
	}
	num, id, ok := strings.Cut(rest, ":")
	if !ok || id == "" {
		return 0, "", fmt.Errorf("%w: malformed", ErrInvalidPageToken)
	}
	created, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("%w: malformed position", ErrInvalidPageToken)
	}
	return created, id, nil
}

// insertWithinLimits checks the owner's usage against limits and inserts the
// row, in one transaction.
func (s *Store) insertWithinLimits(ctx context.Context, owner string, sb sandpit.Sandbox, limits sandpit.OwnerLimits, maxRows int, args []any) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer rollback(tx)
	u, err := ownerUsage(ctx, tx, owner)
	if err != nil {
		return err
	}
	switch {
	case limits.MaxSandboxes > 0 && u.Sandboxes+1 > limits.MaxSandboxes:
		return fmt.Errorf("%w: owner %q may have at most %d sandboxes (limit max_sandboxes)", sandpit.ErrQuotaExceeded, owner, limits.MaxSandboxes)
	case limits.MaxCPU > 0 && u.CPU+sb.CPU > limits.MaxCPU:
		return fmt.Errorf("%w: owner %q may use at most %g cpu in total, %g in use (limit max_cpu)", sandpit.ErrQuotaExceeded, owner, limits.MaxCPU, u.CPU)
	case limits.MaxMemoryMB > 0 && u.MemoryMB+sb.MemoryMB > limits.MaxMemoryMB:
		return fmt.Errorf("%w: owner %q may use at most %d MiB of memory in total, %d in use (limit max_memory_mb)", sandpit.ErrQuotaExceeded, owner, limits.MaxMemoryMB, u.MemoryMB)
	}
	if maxRows > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes WHERE `+countedForCap).Scan(&n); err != nil {
			return err
		}
		if n >= maxRows {
			return fmt.Errorf("at most %d sandboxes: %w", maxRows, sandpit.ErrQuotaExceeded)
		}
	}
	if _, err := s.exec(ctx, tx, qSandboxInsert, args...); err != nil {
		return err
	}
	if err := insertMounts(ctx, tx, owner, sb); err != nil {
		return err
	}
	return tx.Commit()
}

// PageTokenAfter is the page token that continues a listing after the row
// (created, id). Tokens name a position in the (created_at, id) order, not a
// store, so a listing merged from several stores (a cluster's nodes) pages
// with them too.
func PageTokenAfter(created time.Time, id string) string {
	return encodePageToken(toNanos(created), id)
}

// PagePosition is the row (created, id) a page token continues after: the
// inverse of PageTokenAfter, for a merged listing that must know how far
// each store's page reached.
func PagePosition(tok string) (time.Time, string, error) {
	n, id, err := decodePageToken(tok)
	if err != nil {
		return time.Time{}, "", err
	}
	return fromNanos(n), id, nil
}

// EnsureSigningKey returns the sandbox's signing key, storing fresh first
// when it has none: of callers racing for the first key, one stores its
// own and every one of them gets that one.
func (s *Store) EnsureSigningKey(ctx context.Context, id, fresh string) (string, error) {
	if fresh == "" {
		return "", fmt.Errorf("signing key of sandbox %s: empty key", id)
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET signing_key = ? WHERE id = ? AND signing_key = ''`, fresh, id); err != nil {
		return "", fmt.Errorf("signing key of sandbox %s: %w", id, err)
	}
	return s.SigningKey(ctx, id)
}

// SigningKey returns the sandbox's signing key, "" when it has none yet.
func (s *Store) SigningKey(ctx context.Context, id string) (string, error) {
	var key string
	err := s.db.QueryRowContext(ctx, `SELECT signing_key FROM sandboxes WHERE id = ?`, id).Scan(&key)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("signing key of sandbox %s: %w", id, sandpit.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("signing key of sandbox %s: %w", id, err)
	}
	return key, nil
}

// SetSigningKey replaces the sandbox's signing key (a rotation).
func (s *Store) SetSigningKey(ctx context.Context, id, key string, now time.Time) error {
	return s.updateSandbox(ctx, "rotate the signing key of sandbox", id,
		`UPDATE sandboxes SET signing_key = ?, updated_at = ? WHERE id = ?`, key, toNanos(clock(now)), id)
}

// ResizeSandbox sets a sandbox's cpu and memory, checking in the same
// transaction that its owner's totals stay within limits (the sandbox's own
// old figures are not counted twice). A resize to what the row holds
// writes nothing.
func (s *Store) ResizeSandbox(ctx context.Context, id string, cpu float64, memoryMB int64, limits sandpit.OwnerLimits, now time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("resize sandbox %s: %w", id, err)
	}
	defer rollback(tx)
	var owner string
	var oldCPU float64
	var oldMem int64
	err = tx.QueryRowContext(ctx, `SELECT owner, cpu, memory_mb FROM sandboxes WHERE id = ?`, id).Scan(&owner, &oldCPU, &oldMem)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("resize sandbox %s: %w", id, sandpit.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("resize sandbox %s: %w", id, err)
	}
	if oldCPU == cpu && oldMem == memoryMB {
		return nil
	}
	u, err := ownerUsage(ctx, tx, owner)
	if err != nil {
		return err
	}
	switch {
	case limits.MaxCPU > 0 && cpu > oldCPU && u.CPU-oldCPU+cpu > limits.MaxCPU:
		return fmt.Errorf("%w: owner %q may use at most %g cpu in total, %g in use (limit max_cpu)", sandpit.ErrQuotaExceeded, owner, limits.MaxCPU, u.CPU)
	case limits.MaxMemoryMB > 0 && memoryMB > oldMem && u.MemoryMB-oldMem+memoryMB > limits.MaxMemoryMB:
		return fmt.Errorf("%w: owner %q may use at most %d MiB of memory in total, %d in use (limit max_memory_mb)", sandpit.ErrQuotaExceeded, owner, limits.MaxMemoryMB, u.MemoryMB)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET cpu = ?, memory_mb = ?, updated_at = ? WHERE id = ?`,
		cpu, memoryMB, toNanos(clock(now)), id); err != nil {
		return fmt.Errorf("resize sandbox %s: %w", id, err)
	}
	return tx.Commit()
}

// NetworkPoliciesWithRules returns the egress policies of owner's sandboxes
// that hold network rules (which may name the owner's secrets).
func (s *Store) NetworkPoliciesWithRules(ctx context.Context, owner string) ([]sandpit.NetworkPolicy, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT network FROM sandboxes WHERE owner = ? AND json_extract(network, '$.rules') IS NOT NULL`, owner)
	if err != nil {
		return nil, fmt.Errorf("list network rules: %w", err)
	}
	defer rows.Close()
	var out []sandpit.NetworkPolicy
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		var p sandpit.NetworkPolicy
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return nil, fmt.Errorf("network policy: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
