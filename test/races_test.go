package sandpit_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// raceRounds is how many rounds each race runs (SANDPIT_RACE_ROUNDS
// overrides the 50 of the acceptance criteria for quick local runs).
func raceRounds() int {
	if n, err := strconv.Atoi(os.Getenv("SANDPIT_RACE_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 50
}

// together runs the calls at the same instant (as near as goroutines allow)
// and waits for all of them.
func together(calls ...func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c()
		}()
	}
	close(start)
	wg.Wait()
}

// okStatus fails the test on a status no race may produce: a 5xx, or a
// transport error.
func okStatus(t *testing.T, what string, status int, code string, err error, allowed ...int) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	for _, a := range allowed {
		if status == a {
			return
		}
	}
	t.Errorf("%s: status %d (%s), want one of %v", what, status, code, allowed)
}

// TestRaces runs each lifecycle race many times, each followed by the
// consistency checker: whichever call wins, the store, the router, the TCP
// listeners and the engine must agree and nothing may leak.
func TestRaces(t *testing.T) {
	// Its own daemon and labels: it runs beside the other parallel tests
	// rather than before them, which took minutes off the suite.
	t.Parallel()
	rounds := raceRounds()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	// The races run side by side (each has a daemon of its own), so the
	// context must outlive this function, which returns as they start.
	t.Cleanup(cancel)

	// deleteRace creates a sandbox each round and deletes it while the
	// other calls run against it.
	deleteRace := func(t *testing.T, others ...func(d *harness.Daemon, id string, round int)) {
		d := harness.Start(t, sandpitBin, harness.Options{})
		c := d.Client()
		for i := range rounds {
			id := newSandbox(t, ctx, c)
			calls := []func(){func() {
				st, code, _, err := postJSON(ctx, d, http.MethodDelete, "/v1/sandboxes/"+id, "", nil)
				okStatus(t, "delete", st, code, err, http.StatusNoContent)
			}}
			for _, o := range others {
				calls = append(calls, func() { o(d, id, i) })
			}
			together(calls...)
			if t.Failed() {
				t.Fatalf("round %d failed", i)
			}
			d.CheckConsistent(t)
		}
	}
	t.Run("delete vs expose", func(t *testing.T) {
		t.Parallel()
		deleteRace(t,
			func(d *harness.Daemon, id string, _ int) {
				r, err := expose(ctx, d, id, 3000, "http")
				okStatus(t, "expose http", r.status, r.code, err, http.StatusCreated, http.StatusNotFound)
			},
			func(d *harness.Daemon, id string, _ int) {
				r, err := expose(ctx, d, id, 3001, "tcp")
				okStatus(t, "expose tcp", r.status, r.code, err, http.StatusCreated, http.StatusNotFound)
			})
	})
	t.Run("delete vs custom domain", func(t *testing.T) {
		t.Parallel()
		deleteRace(t, func(d *harness.Daemon, id string, i int) {
			// A domain targets an exposed port: the exposure comes first.
			r, err := expose(ctx, d, id, 3000, "http")
			okStatus(t, "expose http", r.status, r.code, err, http.StatusCreated, http.StatusNotFound)
			st, _, code, err := addDomain(ctx, d, id, fmt.Sprintf("race-%d.example.test", i), 3000)
			okStatus(t, "add domain", st, code, err, http.StatusCreated, http.StatusNotFound)
		})
	})

	t.Run("start vs stop", func(t *testing.T) {
		t.Parallel()
		d := harness.Start(t, sandpitBin, harness.Options{})
		c := d.Client()
		id := newSandbox(t, ctx, c)
		mustExpose(t, ctx, d, id, 3000, "http", http.StatusCreated)
		mustExpose(t, ctx, d, id, 3001, "tcp", http.StatusCreated)
		for i := range rounds {
			together(
				func() {
					st, code, _, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/start", "", nil)
					okStatus(t, "start", st, code, err, http.StatusOK)
				},
				func() {
					st, code, _, err := postJSON(ctx, d, http.MethodPost, "/v1/sandboxes/"+id+"/stop", "", nil)
					okStatus(t, "stop", st, code, err, http.StatusOK)
				},
			)
			if t.Failed() {
				t.Fatalf("round %d failed", i)
			}
			d.CheckConsistent(t)
		}
	})

	t.Run("delete during create", func(t *testing.T) {
		t.Parallel()
		d := harness.Start(t, sandpitBin, harness.Options{})
		c := d.Client()
		for i := range rounds {
			round := strconv.Itoa(i)
			created := make(chan error, 1)
			go func() {
				_, err := c.Create(ctx, client.CreateRequest{Labels: map[string]string{"round": round}})
				created <- err
			}()
			// The row appears (creating) before any container exists; the
			// delete is sent as soon as it is visible.
			var id string
			for id == "" {
				page, _, err := c.List(ctx, client.ListOptions{Labels: map[string]string{"round": round}})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > 0 {
					id = page[0].ID
				}
			}
			st, code, _, err := postJSON(ctx, d, http.MethodDelete, "/v1/sandboxes/"+id, "", nil)
			okStatus(t, "delete", st, code, err, http.StatusNoContent)
			if err := <-created; err != nil {
				t.Errorf("create: %v", err)
			}
			if _, err := c.Get(ctx, id); err == nil {
				t.Errorf("sandbox %s survived its delete", id)
			}
			if t.Failed() {
				t.Fatalf("round %d failed", i)
			}
			d.CheckConsistent(t)
		}
	})
}
