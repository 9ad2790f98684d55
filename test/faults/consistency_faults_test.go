package faults_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/driver"
	"github.com/sandpit-dev/sandpit/internal/driver/docker"
	"github.com/sandpit-dev/sandpit/internal/router/builtin"
	"github.com/sandpit-dev/sandpit/internal/service"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// rawDB opens the store's database beside the store, for a test to install
// triggers that make chosen writes fail: the real SQLite refusing a write is
// the fault, not a fake store.
func rawDB(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, "sandpit.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type fixture struct {
	dir    string
	st     *store.Store
	rt     *docker.Docker
	rtr    *builtin.Builtin
	labels map[string]string
	image  string
}

func newFixture(t *testing.T, ctx context.Context) *fixture {
	t.Helper()
	testenv.RequireDocker(t)
	f := &fixture{dir: t.TempDir(), image: testenv.TestImage(t), labels: testenv.RunLabel(t)}
	var err error
	if f.rt, err = docker.New(ctx, docker.Options{}); err != nil {
		t.Fatal(err)
	}
	if f.st, err = store.Open(ctx, f.dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.st.Close() })
	f.rtr = builtin.New(builtin.Options{})
	t.Cleanup(func() { f.rtr.Close() })
	return f
}

func (f *fixture) service(rt driver.Driver) *service.Service {
	return service.New(service.Config{
		DefaultImage: f.image, AgentBinary: agentBin, HealthTimeout: 10 * time.Second,
		ExtraLabels: f.labels, Instance: f.labels[driver.LabelRun],
	}, f.st, rt, f.rtr)
}

// assertEmpty fails unless no container, row, route or listener is left.
func (f *fixture) assertEmpty(t *testing.T, ctx context.Context) {
	t.Helper()
	left, err := f.rt.List(ctx, f.labels)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("%d containers left behind", len(left))
	}
	rows, _, err := f.st.ListSandboxes(ctx, sandpit.ListOptions{})
	if err != nil || len(rows) != 0 {
		t.Errorf("rows left behind: %v %v", rows, err)
	}
	routes, _ := f.rtr.Routes(ctx)
	if len(routes) != 0 || len(f.rtr.Listeners()) != 0 {
		t.Errorf("routes left behind: %v, listeners %v", routes, f.rtr.Listeners())
	}
}

// TestMarkRunningFails makes the store write that marks a new sandbox
// running fail: the create's rollback must take its container, its row and
// its routes. A second case makes the rollback's own row delete fail too:
// the row stays in creating, and the janitor unwinds it without a restart.
func TestMarkRunningFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	db := rawDB(t, f.dir)
	mustExec(t, db, `CREATE TRIGGER fail_running BEFORE UPDATE OF state ON sandboxes
		WHEN NEW.state = 'running' BEGIN SELECT RAISE(ABORT, 'injected: mark running fails'); END`)
	svc := f.service(f.rt)

	_, err := svc.CreateSandbox(ctx, service.CreateRequest{Name: "doomed"})
	if err == nil {
		t.Fatal("create succeeded although marking it running failed")
	}
	f.assertEmpty(t, ctx)

	mustExec(t, db, `CREATE TRIGGER fail_delete BEFORE DELETE ON sandboxes
		BEGIN SELECT RAISE(ABORT, 'injected: delete fails'); END`)
	if _, err := svc.CreateSandbox(ctx, service.CreateRequest{Name: "stuck"}); err == nil {
		t.Fatal("create succeeded although marking it running failed")
	}
	sb, err := f.st.GetSandboxByName(ctx, "stuck")
	if err != nil || sb.State != sandpit.StateCreating {
		t.Fatalf("row after a failed rollback: %+v %v, want it left in creating", sb, err)
	}
	mustExec(t, db, `DROP TRIGGER fail_delete`)
	if n := svc.Janitor(ctx); n != 1 {
		t.Fatalf("janitor finished %d rows, want 1", n)
	}
	f.assertEmpty(t, ctx)
}

func mustExec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// refusingRemove is the real engine except that it refuses to remove one
// container, as an engine with a stuck mount does.
type refusingRemove struct {
	driver.Driver
	victim string
}

var errRefused = errors.New("injected: engine refuses to remove the container")

func (r refusingRemove) Remove(ctx context.Context, id string) error {
	if id == r.victim {
		return errRefused
	}
	return r.Driver.Remove(ctx, id)
}

// TestReconcileSkipsFailingSandbox: two deletes were interrupted by a crash
// and the engine refuses to remove one of the containers. Reconcile must
// finish the other, keep going, and leave the refused one for the janitor,
// which finishes it once the engine cooperates.
func TestReconcileSkipsFailingSandbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	svc := f.service(f.rt)
	var ids []string
	for range 2 {
		sb, err := svc.CreateSandbox(ctx, service.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		// The previous process recorded the delete's intent and died.
		if err := f.st.SetSandboxState(ctx, sb.ID, sandpit.StateDeleting, "", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	stuck, _ := f.st.GetSandbox(ctx, ids[0])
	f.rtr.Close()
	f.rtr = builtin.New(builtin.Options{})
	restarted := f.service(refusingRemove{Driver: f.rt, victim: stuck.ContainerID})
	if err := restarted.Reconcile(ctx); err != nil {
		t.Fatalf("reconcile failed on one sandbox's error: %v", err)
	}
	restarted.Wait()
	if _, err := f.st.GetSandbox(ctx, ids[1]); !errors.Is(err, sandpit.ErrNotFound) {
		t.Errorf("the other interrupted delete was not finished: %v", err)
	}
	if sb, err := f.st.GetSandbox(ctx, ids[0]); err != nil || sb.State != sandpit.StateDeleting {
		t.Errorf("refused sandbox: %+v %v, want it still deleting", sb, err)
	}
	if n := f.service(f.rt).Janitor(ctx); n != 1 {
		t.Fatalf("janitor finished %d rows, want 1", n)
	}
	f.assertEmpty(t, ctx)
}
