package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit"
)

const templateColumns = `id, owner, name, image, build_id, cpu, memory_mb, start_cmd, ready_cmd, user, workdir, created_at, updated_at, kind, source_sandbox`

const buildColumns = `id, template_id, state, content_hash, definition, dockerfile, image, error, start_cmd, ready_cmd, user, workdir, cpu, memory_mb, created_at, started_at, ended_at`

// EnsureTemplate inserts t unless the owner already has a template of that
// non-empty name, which it then returns with AlreadyBound: asking for a
// template by name is how every builder (E2B's alias, Daytona's snapshot
// name, /v1) starts a build, and a retry or a rebuild must land on the same
// template. The partial unique index on (owner, name) decides a race.
func (s *Store) EnsureTemplate(ctx context.Context, t sandpit.Template, now time.Time) (sandpit.Template, sandpit.AddOutcome, error) {
	if t.ID == "" || t.Owner == "" {
		return sandpit.Template{}, 0, errors.New("ensure template: id and owner must not be empty")
	}
	at := toNanos(clock(now))
	_, err := s.db.ExecContext(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		t.ID, t.Owner, t.Name, t.Image, t.BuildID, t.CPU, t.MemoryMB, t.StartCmd, t.ReadyCmd, t.User, t.Workdir, at, at, t.Kind.Or(), t.SourceSandbox)
	switch {
	case err == nil:
		got, err := s.GetTemplate(ctx, t.ID)
		return got, sandpit.Added, err
	case isUniqueViolation(err) && t.Name != "":
		got, err := s.GetTemplateByName(ctx, t.Owner, t.Name)
		return got, sandpit.AlreadyBound, err
	case isPrimaryKeyViolation(err):
		return sandpit.Template{}, 0, fmt.Errorf("ensure template %s: %w", t.ID, sandpit.ErrSandboxExists)
	default:
		return sandpit.Template{}, 0, fmt.Errorf("ensure template %s: %w", t.ID, err)
	}
}

// GetTemplate returns the template with the id, or ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, id string) (sandpit.Template, error) {
	return s.oneTemplate(ctx, "get template "+id, `SELECT `+templateColumns+` FROM templates WHERE id = ?`, id)
}

// GetTemplateByName returns the owner's template of that name, or
// ErrNotFound.
func (s *Store) GetTemplateByName(ctx context.Context, owner, name string) (sandpit.Template, error) {
	if name == "" {
		return sandpit.Template{}, fmt.Errorf("get template by empty name: %w", sandpit.ErrNotFound)
	}
	return s.oneTemplate(ctx, fmt.Sprintf("get template %q of %s", name, owner),
		`SELECT `+templateColumns+` FROM templates WHERE owner = ? AND name = ?`, owner, name)
}

func (s *Store) oneTemplate(ctx context.Context, what, q string, args ...any) (sandpit.Template, error) {
	t, err := scanTemplate(s.db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.Template{}, fmt.Errorf("%s: %w", what, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.Template{}, fmt.Errorf("%s: %w", what, err)
	}
	return t, nil
}

// ListTemplates returns the owner's templates ("" = every owner's), by
// creation.
func (s *Store) ListTemplates(ctx context.Context, owner string) ([]sandpit.Template, error) {
	q := `SELECT ` + templateColumns + ` FROM templates`
	var args []any
	if owner != "" {
		q += ` WHERE owner = ?`
		args = append(args, owner)
	}
	return queryAll(ctx, s.db, "list templates", scanTemplate, q+` ORDER BY created_at, id`, args...)
}

// SetTags points each tag of the template at the build, moving tags that
// named another build.
func (s *Store) SetTags(ctx context.Context, templateID, buildID string, tags []string, now time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("tag build %s: %w", buildID, err)
	}
	defer rollback(tx)
	for _, tag := range tags {
		if _, err := tx.ExecContext(ctx, `INSERT INTO template_tags (template_id, tag, build_id, created_at) VALUES (?,?,?,?)
			ON CONFLICT (template_id, tag) DO UPDATE SET build_id = excluded.build_id, created_at = excluded.created_at`,
			templateID, tag, buildID, toNanos(clock(now))); err != nil {
			if isForeignKeyViolation(err) {
				return fmt.Errorf("tag build %s: %w", buildID, sandpit.ErrNotFound)
			}
			return fmt.Errorf("tag build %s: %w", buildID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("tag build %s: commit: %w", buildID, err)
	}
	return nil
}

// RemoveTags removes the template's tags; tags it does not have are ignored.
func (s *Store) RemoveTags(ctx context.Context, templateID string, tags []string) error {
	for _, tag := range tags {
		if _, err := s.db.ExecContext(ctx, `DELETE FROM template_tags WHERE template_id = ? AND tag = ?`, templateID, tag); err != nil {
			return fmt.Errorf("untag %s: %w", templateID, err)
		}
	}
	return nil
}

// TemplateTag is one tag of a template.
type TemplateTag struct {
	Tag       string
	BuildID   string
	CreatedAt time.Time
}

// ListTags returns the template's tags by name.
func (s *Store) ListTags(ctx context.Context, templateID string) ([]TemplateTag, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tag, build_id, created_at FROM template_tags WHERE template_id = ? ORDER BY tag`, templateID)
	if err != nil {
		return nil, fmt.Errorf("list tags of %s: %w", templateID, err)
	}
	defer rows.Close()
	var out []TemplateTag
	for rows.Next() {
		var (
			tg TemplateTag
			at int64
		)
		if err := rows.Scan(&tg.Tag, &tg.BuildID, &at); err != nil {
			return nil, fmt.Errorf("list tags of %s: %w", templateID, err)
		}
		tg.CreatedAt = fromNanos(at)
		out = append(out, tg)
	}
	return out, rows.Err()
}

// DeleteTemplate removes the template and its builds; ErrNotFound when it
// does not exist.
func (s *Store) DeleteTemplate(ctx context.Context, id string) error {
	return s.updateOne(ctx, "delete template "+id, `DELETE FROM templates WHERE id = ?`, id)
}

func (s *Store) updateOne(ctx context.Context, what, q string, args ...any) error {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, sandpit.ErrNotFound)
	}
	return nil
}

// CreateBuild inserts a waiting build of its template and makes it the
// template's newest build.
func (s *Store) CreateBuild(ctx context.Context, b sandpit.TemplateBuild, now time.Time) error {
	if b.ID == "" || b.TemplateID == "" {
		return errors.New("create build: id and template id must not be empty")
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create build %s: %w", b.ID, err)
	}
	defer rollback(tx)
	at := toNanos(clock(now))
	if _, err := tx.ExecContext(ctx, `INSERT INTO template_builds (id, template_id, state, content_hash, definition, created_at) VALUES (?,?,?,?,?,?)`,
		b.ID, b.TemplateID, sandpit.BuildWaiting, b.ContentHash, b.Definition, at); err != nil {
		if isForeignKeyViolation(err) {
			return fmt.Errorf("create build %s: template %s: %w", b.ID, b.TemplateID, sandpit.ErrNotFound)
		}
		return fmt.Errorf("create build %s: %w", b.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE templates SET build_id = ?, updated_at = ? WHERE id = ?`, b.ID, at, b.TemplateID); err != nil {
		return fmt.Errorf("create build %s: %w", b.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("create build %s: commit: %w", b.ID, err)
	}
	return nil
}

// StartBuild moves a waiting build to building with what it builds. The
// partial unique index allows one running build per template: when another
// runs, the build stays waiting and the error wraps ErrBuildConflict.
func (s *Store) StartBuild(ctx context.Context, b sandpit.TemplateBuild, now time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE template_builds SET state = 'building', content_hash = ?, definition = ?, dockerfile = ?,
		start_cmd = ?, ready_cmd = ?, user = ?, workdir = ?, cpu = ?, memory_mb = ?, started_at = ?
		WHERE id = ? AND state = 'waiting'`,
		b.ContentHash, b.Definition, b.Dockerfile, b.StartCmd, b.ReadyCmd, b.User, b.Workdir, b.CPU, b.MemoryMB, toNanos(clock(now)), b.ID)
	if err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("start build %s: %w", b.ID, sandpit.ErrBuildConflict)
		}
		return fmt.Errorf("start build %s: %w", b.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("start build %s: %w", b.ID, err)
	}
	if n == 0 {
		got, err := s.GetBuild(ctx, b.ID)
		if err != nil {
			return fmt.Errorf("start build %s: %w", b.ID, err)
		}
		return fmt.Errorf("start build %s: it is %s, not waiting: %w", b.ID, got.State, sandpit.ErrBuildConflict)
	}
	return nil
}

// SetBuildDefinition records what a waiting build builds without starting
// it: the build joined a running build of the same content, which holds its
// template's one running slot.
func (s *Store) SetBuildDefinition(ctx context.Context, b sandpit.TemplateBuild, now time.Time) error {
	return s.updateOne(ctx, "define build "+b.ID, `UPDATE template_builds SET content_hash = ?, definition = ?, dockerfile = ?,
		start_cmd = ?, ready_cmd = ?, user = ?, workdir = ?, cpu = ?, memory_mb = ?, started_at = ?
		WHERE id = ? AND state = 'waiting'`,
		b.ContentHash, b.Definition, b.Dockerfile, b.StartCmd, b.ReadyCmd, b.User, b.Workdir, b.CPU, b.MemoryMB, toNanos(clock(now)), b.ID)
}

// FinishBuild ends a running (or waiting) build. A ready build's image and
// commands become its template's, in the same transaction, so a template
// never points at an image no build finished. Ending a build that already
// ended changes nothing and is not an error: the first end stands.
func (s *Store) FinishBuild(ctx context.Context, id string, state sandpit.BuildState, image, reason string, now time.Time) error {
	if !state.Done() {
		return fmt.Errorf("finish build %s: %q is not an end state", id, state)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("finish build %s: %w", id, err)
	}
	defer rollback(tx)
	at := toNanos(clock(now))
	res, err := tx.ExecContext(ctx, `UPDATE template_builds SET state = ?, image = ?, error = ?, ended_at = ?
		WHERE id = ? AND state IN ('waiting', 'building')`, state, image, reason, at, id)
	if err != nil {
		return fmt.Errorf("finish build %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return fmt.Errorf("finish build %s: %w", id, err)
		}
		// Nothing changed: the build ended already, or it does not exist.
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM template_builds WHERE id = ?`, id).Scan(&n); err != nil {
			return fmt.Errorf("finish build %s: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("finish build %s: %w", id, sandpit.ErrNotFound)
		}
		return nil
	}
	if state == sandpit.BuildReady {
		if _, err := tx.ExecContext(ctx, `UPDATE templates SET image = b.image, start_cmd = b.start_cmd, ready_cmd = b.ready_cmd,
			user = b.user, workdir = b.workdir, cpu = b.cpu, memory_mb = b.memory_mb, updated_at = ?
			FROM (SELECT template_id, image, start_cmd, ready_cmd, user, workdir, cpu, memory_mb FROM template_builds WHERE id = ?) AS b
			WHERE templates.id = b.template_id`, at, id); err != nil {
			return fmt.Errorf("finish build %s: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("finish build %s: commit: %w", id, err)
	}
	return nil
}

// GetBuild returns the build with the id, or ErrNotFound.
func (s *Store) GetBuild(ctx context.Context, id string) (sandpit.TemplateBuild, error) {
	b, err := scanBuild(s.db.QueryRowContext(ctx, `SELECT `+buildColumns+` FROM template_builds WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return sandpit.TemplateBuild{}, fmt.Errorf("get build %s: %w", id, sandpit.ErrNotFound)
	}
	if err != nil {
		return sandpit.TemplateBuild{}, fmt.Errorf("get build %s: %w", id, err)
	}
	return b, nil
}

// ListBuilds returns the template's builds, oldest first.
func (s *Store) ListBuilds(ctx context.Context, templateID string) ([]sandpit.TemplateBuild, error) {
	return s.queryBuilds(ctx, "list builds of "+templateID,
		`SELECT `+buildColumns+` FROM template_builds WHERE template_id = ? ORDER BY created_at, id`, templateID)
}

// ListUnfinishedBuilds returns every build that is waiting or building,
// which after a restart are the builds the previous process left.
func (s *Store) ListUnfinishedBuilds(ctx context.Context) ([]sandpit.TemplateBuild, error) {
	return s.queryBuilds(ctx, "list unfinished builds",
		`SELECT `+buildColumns+` FROM template_builds WHERE state IN ('waiting', 'building') ORDER BY created_at, id`)
}

// CountRunningBuilds counts the builds running for the owner's templates
// ("" = everyone's).
func (s *Store) CountRunningBuilds(ctx context.Context, owner string) (int, error) {
	q := `SELECT count(*) FROM template_builds b JOIN templates t ON t.id = b.template_id WHERE b.state = 'building'`
	var args []any
	if owner != "" {
		q += ` AND t.owner = ?`
		args = append(args, owner)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count running builds: %w", err)
	}
	return n, nil
}

// ImageInUse reports whether any template's current image or ready build
// is ref, so the janitor never removes an image a template still runs.
func (s *Store) ImageInUse(ctx context.Context, ref string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM templates WHERE image = ?) + (SELECT count(*) FROM template_builds WHERE image = ? AND state = 'ready')`, ref, ref).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("image in use %s: %w", ref, err)
	}
	return n > 0, nil
}

// OwnerImages lists the images of the owner's ready builds and templates,
// newest first, at most limit of them: the only images the owner's next
// build may reuse as its layer cache.
func (s *Store) OwnerImages(ctx context.Context, owner string, limit int) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT image FROM (
		SELECT b.image AS image, coalesce(b.ended_at, b.created_at) AS at FROM template_builds b JOIN templates t ON t.id = b.template_id
			WHERE t.owner = ? AND b.state = 'ready' AND b.image <> ''
		UNION ALL
		SELECT image, updated_at FROM templates WHERE owner = ? AND image <> ''
	) GROUP BY image ORDER BY max(at) DESC LIMIT ?`, owner, owner, limit)
	if err != nil {
		return nil, fmt.Errorf("owner images %s: %w", owner, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ref string
		if err := rows.Scan(&ref); err != nil {
			return nil, fmt.Errorf("owner images %s: %w", owner, err)
		}
		out = append(out, ref)
	}
	return out, rows.Err()
}

// ImageOwnedBy reports whether ref is the image of one of the owner's
// templates or of one of their ready builds.
func (s *Store) ImageOwnedBy(ctx context.Context, owner, ref string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM templates t WHERE t.owner = ? AND (t.image = ?
		OR EXISTS (SELECT 1 FROM template_builds b WHERE b.template_id = t.id AND b.state = 'ready' AND b.image = ?))`, owner, ref, ref).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("image owned by %s: %w", owner, err)
	}
	return n > 0, nil
}

func (s *Store) queryBuilds(ctx context.Context, what, q string, args ...any) ([]sandpit.TemplateBuild, error) {
	return queryAll(ctx, s.db, what, scanBuild, q, args...)
}

// queryAll runs q and scans every row with scan.
func queryAll[T any](ctx context.Context, db *sql.DB, what string, scan func(rowScanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

func scanTemplate(r rowScanner) (sandpit.Template, error) {
	var (
		t                sandpit.Template
		created, updated int64
		kind             string
	)
	if err := r.Scan(&t.ID, &t.Owner, &t.Name, &t.Image, &t.BuildID, &t.CPU, &t.MemoryMB,
		&t.StartCmd, &t.ReadyCmd, &t.User, &t.Workdir, &created, &updated, &kind, &t.SourceSandbox); err != nil {
		return sandpit.Template{}, err
	}
	t.Kind = sandpit.TemplateKind(kind)
	t.CreatedAt, t.UpdatedAt = fromNanos(created), fromNanos(updated)
	return t, nil
}

func scanBuild(r rowScanner) (sandpit.TemplateBuild, error) {
	var (
		b              sandpit.TemplateBuild
		state          string
		created        int64
		started, ended sql.NullInt64
	)
	if err := r.Scan(&b.ID, &b.TemplateID, &state, &b.ContentHash, &b.Definition, &b.Dockerfile, &b.Image, &b.Error,
		&b.StartCmd, &b.ReadyCmd, &b.User, &b.Workdir, &b.CPU, &b.MemoryMB, &created, &started, &ended); err != nil {
		return sandpit.TemplateBuild{}, err
	}
	b.State = sandpit.BuildState(state)
	b.CreatedAt, b.StartedAt, b.EndedAt = fromNanos(created), fromNullNanos(started), fromNullNanos(ended)
	return b, nil
}

// ListSnapshots returns the owner's snapshots ("" = every owner's), by
// creation, narrowed to those of one source sandbox and one name when they
// are given.
func (s *Store) ListSnapshots(ctx context.Context, owner, source, name string) ([]sandpit.Template, error) {
	q := `SELECT ` + templateColumns + ` FROM templates WHERE kind = 'snapshot'`
	var args []any
	for _, f := range []struct{ col, v string }{{"owner", owner}, {"source_sandbox", source}, {"name", name}} {
		if f.v != "" {
			q += ` AND ` + f.col + ` = ?`
			args = append(args, f.v)
		}
	}
	return queryAll(ctx, s.db, "list snapshots", scanTemplate, q+` ORDER BY created_at, id`, args...)
}

// ListForkBases returns every fork's base snapshot, oldest first.
func (s *Store) ListForkBases(ctx context.Context) ([]sandpit.Template, error) {
	return queryAll(ctx, s.db, "list fork bases", scanTemplate, `SELECT `+templateColumns+` FROM templates WHERE kind = 'fork' ORDER BY created_at, id`)
}

// SandboxesRunning returns the ids of the sandboxes whose image is ref,
// whatever their state: a stopped or paused sandbox needs its image to run
// again.
func (s *Store) SandboxesRunning(ctx context.Context, ref string) ([]string, error) {
	return queryAll(ctx, s.db, "sandboxes of image "+ref, func(r rowScanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, `SELECT id FROM sandboxes WHERE image = ? ORDER BY created_at, id`, ref)
}
