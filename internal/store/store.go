package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// File names inside the data directory.
const (
	dbFileName   = "sandpit.db"
	lockFileName = "sandpit.lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Store is the daemon's only writer. It owns the SQLite database in the data
// directory and an exclusive lock on that directory for as long as it is open.
type Store struct {
	db   *sql.DB
	lock *os.File
	dir  string
	// stmts holds the statements of the hot paths, prepared once at Open;
	// it is only written before Open returns. See prepareStatements.
	stmts map[string]*sql.Stmt
	// index mirrors the sandboxes' ids, tokens and running state in memory
	// (see sandboxIndex).
	index sandboxIndex
	// activity counts the activity writes (see ActivityWrites).
	activity activityWrites

	closeOnce sync.Once
	closeErr  error
}

// Open locks dataDir, opens (creating if needed) <dataDir>/sandpit.db and brings
// its schema up to date. It fails with an error wrapping ErrDataDirLocked when
// another Store, in this or another process, holds the directory.
func Open(ctx context.Context, dataDir string) (*Store, error) {
	if dataDir == "" {
		return nil, errors.New("open store: data directory must not be empty")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("open store: resolve data directory %q: %w", dataDir, err)
	}
	// The driver splits its DSN at the first '?', so a path containing one
	// would be cut short and silently open a different file.
	if strings.ContainsRune(dir, '?') {
		return nil, fmt.Errorf("open store: data directory %q must not contain '?'", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open store: create data directory %s: %w", dir, err)
	}

	lock, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{lock: lock, dir: dir}
	ok := false
	defer func() {
		if !ok {
			s.releaseLock()
		}
	}()

	dbPath := filepath.Join(dir, dbFileName)
	// Create the file ourselves so it never exists, even briefly, with the
	// umask-derived mode SQLite would give it; the chmod covers a file that
	// already existed with a looser mode.
	f, err := os.OpenFile(dbPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open store: create %s: %w", dbPath, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("open store: create %s: %w", dbPath, err)
	}
	if err := os.Chmod(dbPath, 0o600); err != nil {
		return nil, fmt.Errorf("open store: chmod %s: %w", dbPath, err)
	}

	db, err := sql.Open("sqlite", dsn(dbPath))
	if err != nil {
		return nil, fmt.Errorf("open store: open %s: %w", dbPath, err)
	}
	// SQLite allows one writer at a time. Rather than let several pooled
	// connections contend for that lock (and fail with "database is locked"
	// when the busy timeout runs out), the daemon keeps exactly one connection:
	// every API handler, event handler and background sweep then waits its
	// turn inside database/sql, so writes are serialised in Go and the schema's
	// unique constraints, not timing, decide every race. The connection is
	// never recycled, so its per-connection pragmas stay in force.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s.db = db

	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store: connect to %s: %w", dbPath, err)
	}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store: %s: %w", dbPath, err)
	}
	if err := s.prepareStatements(ctx); err != nil {
		s.closeStatements()
		_ = db.Close()
		return nil, fmt.Errorf("open store: %s: %w", dbPath, err)
	}
	if err := s.index.load(ctx, s); err != nil {
		s.closeStatements()
		_ = db.Close()
		return nil, fmt.Errorf("open store: %s: %w", dbPath, err)
	}
	// WAL and shared-memory files are created by SQLite with the database
	// file's permissions; tighten them anyway in case they predate us.
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Chmod(dbPath+suffix, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.closeStatements()
			_ = db.Close()
			return nil, fmt.Errorf("open store: chmod %s%s: %w", dbPath, suffix, err)
		}
	}
	ok = true
	return s, nil
}

// dsn builds the driver's connection string. The settings are passed as
// _pragma parameters so the driver applies them to every connection it opens,
// not only the first; with one connection that is belt and braces, but a
// reconnect must never come up without foreign keys or with a weaker sync mode.
//
//   - busy_timeout=5000: waits for a lock held by an outside reader (say the
//     sqlite3 shell) instead of failing at once.
//   - journal_mode=WAL: readers do not block the writer and vice versa.
//   - foreign_keys=ON: SQLite leaves them off by default, and the cascades on
//     exposed_ports, sandbox_custom_domains and the TAP pool depend on them.
//   - synchronous=FULL: an acknowledged commit is on disk, even in WAL mode.
//   - _txlock=immediate: transactions take the write lock at BEGIN, so a
//     read-then-write transaction can never fail to upgrade its lock.
func dsn(path string) string {
	return path +
		"?_pragma=busy_timeout(5000)" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(ON)" +
		"&_pragma=synchronous(FULL)" +
		"&_txlock=immediate"
}

// lockDataDir takes an exclusive, non-blocking flock on <dir>/sandpit.lock.
// flock locks belong to the open file description, so the lock also refuses a
// second Open of the same directory from within this process.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open store: open lock file %s: %w", path, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("open store: data directory %s is in use by another sandpit process (lock %s is held); two processes would be two writers: %w",
				dir, path, ErrDataDirLocked)
		}
		return nil, fmt.Errorf("open store: lock %s: %w", path, err)
	}
	return f, nil
}

func (s *Store) releaseLock() error {
	if s.lock == nil {
		return nil
	}
	// Closing the file releases the flock; the explicit unlock makes the
	// intent visible and covers a descriptor that might have been inherited.
	uerr := unix.Flock(int(s.lock.Fd()), unix.LOCK_UN)
	cerr := s.lock.Close()
	s.lock = nil
	if uerr != nil {
		return fmt.Errorf("unlock data directory %s: %w", s.dir, uerr)
	}
	if cerr != nil {
		return fmt.Errorf("close lock file in %s: %w", s.dir, cerr)
	}
	return nil
}

// Close closes the database and then releases the data-directory lock, in that
// order, so no other process can open the directory while this one may still
// write. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		s.closeStatements()
		if s.db != nil {
			if err := s.db.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close database in %s: %w", s.dir, err))
			}
		}
		if err := s.releaseLock(); err != nil {
			errs = append(errs, err)
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// preparedQueries are the statements on the request paths (claims, port
// reservations, creates and lookups). Parsing SQL is a large share of the cost
// of a small write in SQLite, so they are parsed once per Store instead of on
// every call. They must be prepared at Open: preparing on demand inside a
// transaction would need a second connection, and there is only one.
var preparedQueries = []string{
	qSandboxInsert, qSandboxInsertCapped, qSandboxByID,
	qPortInsert, qPortByKey,
	qClaimInsert, qClaimSelect, qClaimRenewLock, qClaimRestart, qSetTarget, qComplete,
	qTapAllocate, qTapBySandbox,
	qDomainInsert, qDomainByHostname,
	qTokenByPrefix,
}

func (s *Store) prepareStatements(ctx context.Context) error {
	s.stmts = make(map[string]*sql.Stmt, len(preparedQueries))
	for _, q := range preparedQueries {
		st, err := s.db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", strings.Join(strings.Fields(q), " "), err)
		}
		s.stmts[q] = st
	}
	return nil
}

func (s *Store) closeStatements() {
	for _, st := range s.stmts {
		_ = st.Close()
	}
}

// exec runs q inside tx, or on its own when tx is nil, through its prepared
// statement when it has one. Within a transaction database/sql reuses the
// statement already prepared on the store's single connection.
func (s *Store) exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	st, ok := s.stmts[q]
	switch {
	case ok && tx != nil:
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	case ok:
		return st.ExecContext(ctx, args...)
	case tx != nil:
		return tx.ExecContext(ctx, q, args...)
	default:
		return s.db.ExecContext(ctx, q, args...)
	}
}

// queryRow is exec's counterpart for single-row queries.
func (s *Store) queryRow(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	st, ok := s.stmts[q]
	switch {
	case ok && tx != nil:
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	case ok:
		return st.QueryRowContext(ctx, args...)
	case tx != nil:
		return tx.QueryRowContext(ctx, q, args...)
	default:
		return s.db.QueryRowContext(ctx, q, args...)
	}
}

var pragmaName = regexp.MustCompile(`^[a-z_]+$`)

// Stats reports the connection pool's state. Its MaxOpenConnections is 1 by
// construction: that single connection is what serialises every write.
func (s *Store) Stats() sql.DBStats { return s.db.Stats() }

// Pragma returns the current value of a read-only PRAGMA query such as
// "journal_mode" or "user_version", for diagnostics and tests. Only the plain
// query form is allowed; nothing can be assigned through it.
func (s *Store) Pragma(ctx context.Context, name string) (string, error) {
	if !pragmaName.MatchString(name) {
		return "", fmt.Errorf("pragma %q: invalid name", name)
	}
	var v any
	if err := s.db.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v); err != nil {
		return "", fmt.Errorf("pragma %s: %w", name, err)
	}
	switch x := v.(type) {
	case []byte:
		return string(x), nil
	case nil:
		return "", nil
	default:
		return fmt.Sprint(x), nil
	}
}

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded migrations, numbered by the digits before
// the first '_' of their file names, and insists on 1..N without gaps so a
// missing file cannot be skipped silently.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", e.Name())
		}
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: bad version number %q", e.Name(), num)
		}
		body, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d", m.name, i+1)
		}
	}
	return ms, nil
}

// migrate applies, in order, every migration newer than PRAGMA user_version.
// Each migration and its user_version bump commit in one transaction, so a
// crash leaves the schema at a whole version, never half-way through one.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	for {
		done, err := s.migrateOne(ctx, ms)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// migrateOne applies the next pending migration, if any, and reports whether
// the schema was already current. The version is read inside the transaction,
// which holds the write lock from BEGIN, so the decision cannot be stale.
func (s *Store) migrateOne(ctx context.Context, ms []migration) (done bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() {
		if err != nil || done {
			_ = tx.Rollback()
		}
	}()
	var cur int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&cur); err != nil {
		return false, fmt.Errorf("migrate: read user_version: %w", err)
	}
	if cur > len(ms) {
		return false, fmt.Errorf("migrate: database schema version %d is newer than this binary knows (%d)", cur, len(ms))
	}
	if cur == len(ms) {
		return true, nil
	}
	m := ms[cur]
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return false, fmt.Errorf("migrate: apply %s: %w", m.name, err)
	}
	// PRAGMA takes no bound parameters; the version is an integer we control.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
		return false, fmt.Errorf("migrate: set user_version %d: %w", m.version, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrate: commit %s: %w", m.name, err)
	}
	return false, nil
}

// sqliteCode returns the extended SQLite result code carried by err, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

func isUniqueViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

func isPrimaryKeyViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

func isForeignKeyViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// Times are stored as INTEGER Unix nanoseconds, UTC, so SQL comparisons are
// plain integer comparisons.

// clock returns now, or the wall clock when the caller passed the zero time.
// Callers that care (tests, sweeps) always pass an explicit now.
func clock(now time.Time) time.Time {
	if now.IsZero() {
		return time.Now()
	}
	return now
}

func toNanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// nullableNanos maps the zero time to NULL.
func nullableNanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func fromNullNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}

// rollback is deferred by transactional methods; after a successful Commit it
// is a harmless no-op returning sql.ErrTxDone.
func rollback(tx *sql.Tx) { _ = tx.Rollback() }

// SchemaVersion is the user_version the embedded migrations bring a database
// to; tests compare against it so that a new migration does not break them.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil {
		return 0
	}
	return len(ms)
}
