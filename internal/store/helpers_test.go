package store_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit"

	"github.com/sandpit-dev/sandpit/internal/store"
)

// t0 is the tests' fixed clock; tests advance it explicitly.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func openStore(t testing.TB) (*store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, dir
}

func createSandbox(t testing.TB, s *store.Store, id, name string) sandpit.Sandbox {
	t.Helper()
	sb := sandpit.Sandbox{
		ID:        id,
		Name:      name,
		Image:     "busybox",
		State:     sandpit.StateRunning,
		CreatedAt: t0,
	}
	if err := s.CreateSandbox(context.Background(), sb); err != nil {
		t.Fatalf("CreateSandbox(%s): %v", id, err)
	}
	return sb
}

// parallel runs fn(i) for i in [0, n) on n goroutines released together, so
// that the calls genuinely contend, and waits for all of them.
func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

// latestVersion is the schema version the embedded migrations lead to: the
// number of migration files, since they are numbered 1..N without gaps.
func latestVersion(t testing.TB) string {
	t.Helper()
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".sql") {
			n++
		}
	}
	return strconv.Itoa(n)
}
