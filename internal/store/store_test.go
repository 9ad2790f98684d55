package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

// rawDB opens the store's database file with a second, independent handle, the
// way an operator's sqlite3 shell would.
func rawDB(t *testing.T, dir string, readOnly bool) *sql.DB {
	t.Helper()
	dsn := filepath.Join(dir, "sandpit.db")
	if readOnly {
		dsn = "file:" + dsn + "?mode=ro"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("open raw db: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpenSameDirTwiceFails(t *testing.T) {
	ctx := context.Background()
	s, dir := openStore(t)

	s2, err := store.Open(ctx, dir)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of the same data dir succeeded")
	}
	if !errors.Is(err, store.ErrDataDirLocked) {
		t.Fatalf("second Open: got %v, want ErrDataDirLocked", err)
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another sandpit process") {
		t.Errorf("error %q should name the directory and say another sandpit process uses it", err)
	}

	// Releasing the first store frees the directory.
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s3, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s3.Close()
}

// TestOpenLockedAcrossProcesses runs this test binary again as a child that
// tries to open a directory the parent holds.
func TestOpenLockedAcrossProcesses(t *testing.T) {
	if dir := os.Getenv("SANDPIT_STORE_LOCK_CHILD"); dir != "" {
		_, err := store.Open(context.Background(), dir)
		if errors.Is(err, store.ErrDataDirLocked) {
			fmt.Println("LOCKED:", err)
			return
		}
		t.Fatalf("child Open: got %v, want ErrDataDirLocked", err)
	}
	_, dir := openStore(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenLockedAcrossProcesses$", "-test.v")
	cmd.Env = append(os.Environ(), "SANDPIT_STORE_LOCK_CHILD="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "LOCKED:") {
		t.Fatalf("child process was not refused: err=%v\n%s", err, out)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestDatabaseFileMode(t *testing.T) {
	dir := t.TempDir()
	// A file left behind with a looser mode is tightened on Open.
	if err := os.WriteFile(filepath.Join(dir, "sandpit.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, name := range []string{"sandpit.db", "sandpit.db-wal"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("stat %s: %v", name, err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s mode = %o, want 600", name, got)
		}
	}

	// A fresh directory is created 0700 and its database 0600.
	fresh := filepath.Join(t.TempDir(), "nested", "data")
	s2, err := store.Open(context.Background(), fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for name, want := range map[string]os.FileMode{"": 0o700, "sandpit.db": 0o600} {
		fi, err := os.Stat(filepath.Join(fresh, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%q mode = %o, want %o", name, got, want)
		}
	}
}

func TestPragmas(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for name, want := range map[string]string{
		"journal_mode": "wal",
		"foreign_keys": "1",
		"busy_timeout": "5000",
		"synchronous":  "2", // FULL
		"user_version": strconv.Itoa(store.SchemaVersion()),
	} {
		got, err := s.Pragma(ctx, name)
		if err != nil {
			t.Fatalf("Pragma(%s): %v", name, err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %q, want %q", name, got, want)
		}
	}
	if _, err := s.Pragma(ctx, "user_version = 7"); err == nil {
		t.Error("Pragma accepted an assignment")
	}
}

func TestSchemaHasPartialUniqueIndexes(t *testing.T) {
	_, dir := openStore(t)
	db := rawDB(t, dir, true)
	want := map[string][]string{
		"idx_sandboxes_name":               {"UNIQUE", "sandboxes(name)", "WHERE name <> ''"},
		"idx_exposed_ports_host_port":      {"UNIQUE", "exposed_ports(host_port)", "WHERE host_port > 0"},
		"idx_firecracker_tap_pool_sandbox": {"UNIQUE", "firecracker_tap_pool(sandbox_id)", "WHERE sandbox_id IS NOT NULL"},
	}
	for name, parts := range want {
		var ddl string
		if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?`, name).Scan(&ddl); err != nil {
			t.Fatalf("index %s: %v", name, err)
		}
		for _, p := range parts {
			if !strings.Contains(ddl, p) {
				t.Errorf("index %s = %q, missing %q", name, ddl, p)
			}
		}
	}
	for table, parts := range map[string][]string{
		"exposed_ports":          {"PRIMARY KEY (sandbox_id, port)", "ON DELETE CASCADE"},
		"sandbox_custom_domains": {"hostname", "PRIMARY KEY", "ON DELETE CASCADE"},
		"request_idempotency":    {"PRIMARY KEY (scope, fingerprint)", "locked_until", "replay_until", "generation"},
		"firecracker_tap_pool":   {"vsock_cid", "UNIQUE", "ON DELETE SET NULL"},
	} {
		var ddl string
		if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&ddl); err != nil {
			t.Fatalf("table %s: %v", table, err)
		}
		for _, p := range parts {
			if !strings.Contains(ddl, p) {
				t.Errorf("table %s is missing %q:\n%s", table, p, ddl)
			}
		}
	}
}

func TestMigrationsIdempotentOnReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	createSandbox(t, s, "sb-keep", "keep")
	v1, _ := s.Pragma(ctx, "user_version")
	s.Close()

	for range 2 {
		s, err = store.Open(ctx, dir)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		v, _ := s.Pragma(ctx, "user_version")
		if v != v1 || v != strconv.Itoa(store.SchemaVersion()) {
			t.Errorf("user_version after reopen = %s, want %s", v, v1)
		}
		if _, err := s.GetSandbox(ctx, "sb-keep"); err != nil {
			t.Errorf("data lost on reopen: %v", err)
		}
		s.Close()
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := rawDB(t, dir, false)
	if _, err := db.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if s, err := store.Open(ctx, dir); err == nil {
		s.Close()
		t.Fatal("Open accepted a schema newer than the binary")
	}
	// The failed Open must not keep the directory locked.
	db = rawDB(t, dir, false)
	if _, err := db.Exec(`PRAGMA user_version = ` + strconv.Itoa(store.SchemaVersion())); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err = store.Open(ctx, dir)
	if err != nil {
		t.Fatalf("Open after failed Open: %v", err)
	}
	s.Close()
}

// TestOneWriterConnection: however many goroutines write at once, the store
// never opens a second connection; they queue for the one it has.
func TestOneWriterConnection(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	if got := s.Stats().MaxOpenConnections; got != 1 {
		t.Fatalf("MaxOpenConnections = %d, want 1", got)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := 0
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			createSandbox(t, s, fmt.Sprintf("sb-one-writer-%d", i), "")
			mu.Lock()
			peak = max(peak, s.Stats().OpenConnections)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if peak != 1 {
		t.Fatalf("peak open connections = %d, want 1", peak)
	}
	if st := s.Stats(); st.WaitCount == 0 {
		t.Logf("no writer had to wait (the machine ran them one by one)")
	}
	rows, _, err := s.ListSandboxes(ctx, sandpit.ListOptions{Limit: 100})
	if err != nil || len(rows) != 64 {
		t.Fatalf("rows = %d %v", len(rows), err)
	}
}
