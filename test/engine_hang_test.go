package sandpit_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// TestEngineHangs puts a proxy that can stop answering between the daemon
// and the engine. While the engine hangs, API calls that need it fail within
// the engine timeout with 504 or 503, calls that do not keep answering, and
// the sweeper keeps trying every expired sandbox rather than waiting on the
// first; once the engine answers again, everything converges.
func TestEngineHangs(t *testing.T) {
	// The limit also bounds the engine calls of the set-up below, made
	// while the engine answers: on a loaded CI machine a container's start
	// alone has taken more than 2 s.
	const limit = 6 * time.Second
	proxy := harness.NewEngineProxy(t)
	d := harness.Start(t, sandpitBin, harness.Options{
		Env:  []string{"DOCKER_HOST=" + proxy.Host},
		Args: []string{"--engine-timeout", limit.String(), "--janitor-interval", "1s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := d.Client()
	keep := newSandbox(t, ctx, c)
	mustExpose(t, ctx, d, keep, 3000, "tcp", http.StatusCreated)
	// The sandboxes that are to expire while the engine hangs get their
	// short timeout only once all are made: on a loaded machine a create
	// alone has taken more than 5 s, and a timeout given at create could
	// run out before the engine is made to hang.
	var expiring []string
	for range 2 {
		sb, err := c.Create(ctx, client.CreateRequest{TimeoutS: 600})
		if err != nil {
			t.Fatal(err)
		}
		expiring = append(expiring, sb.ID)
	}
	d.CheckConsistent(t)
	for _, id := range expiring {
		// E2B's setTimeout is the API that shortens a running sandbox's
		// timeout; it writes the store only.
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/e2b/sandboxes/"+id+"/timeout", strings.NewReader(`{"timeout": 2}`))
		req.Header.Set("X-API-Key", d.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("set the timeout of %s: %d", id, resp.StatusCode)
		}
	}

	proxy.Pause()
	hungAt := time.Now()
	calls := []struct {
		name, method, path, body string
		within                   time.Duration
	}{
		// Create makes one engine call, then its rollback a second one.
		{"create", http.MethodPost, "/v1/sandboxes", `{}`, 2*limit + 2*time.Second},
		{"stop", http.MethodPost, "/v1/sandboxes/" + keep + "/stop", ``, 2*limit + 5*time.Second + 2*time.Second},
		{"debug state", http.MethodGet, "/v1/debug/state", ``, limit + 2*time.Second},
	}
	for _, call := range calls {
		began := time.Now()
		st, code, msg, err := postJSON(ctx, d, call.method, call.path, call.body, nil)
		took := time.Since(began)
		if err != nil || (st != http.StatusGatewayTimeout && st != http.StatusServiceUnavailable) {
			t.Errorf("%s while the engine hangs: %d %s %q %v, want 504 or 503", call.name, st, code, msg, err)
		}
		if took > call.within {
			t.Errorf("%s took %s, want within %s", call.name, took.Round(time.Millisecond), call.within)
		}
		t.Logf("%s while the engine hangs: %d after %s", call.name, st, took.Round(time.Millisecond))
	}
	// Reads of the store do not wait for the engine.
	if sb, err := c.Get(ctx, keep); err != nil {
		t.Errorf("get while the engine hangs: %v", err)
	} else {
		t.Logf("get while the engine hangs: %s", sb.State)
	}
	// Both expired sandboxes are attempted, again and again: one hung
	// delete does not stall the sweep.
	for deadline := time.Now().Add(10 * limit); ; time.Sleep(200 * time.Millisecond) {
		logs := d.Logs()
		tried := 0
		for _, id := range expiring {
			if strings.Count(logs, `msg="sweep: delete expired sandbox" sandbox=`+id) >= 2 {
				tried++
			}
		}
		if tried == len(expiring) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweeper did not retry every expired sandbox while the engine hung")
		}
	}
	t.Logf("engine hung for %s", time.Since(hungAt).Round(time.Millisecond))
	proxy.Resume()

	for _, id := range expiring {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if _, err := c.Get(ctx, id); err != nil && strings.Contains(err.Error(), "404") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("expired sandbox %s not deleted after the engine recovered", id)
			}
		}
	}
	// The stop the daemon gave up on may still reach the engine; either way
	// the daemon converges on what the engine did.
	d.CheckConsistent(t)
	if _, err := c.Start(ctx, keep); err != nil {
		t.Fatalf("start after recovery: %v", err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatalf("create after recovery: %v", err)
	}
	_ = sb
	d.CheckConsistent(t)
}

// TestKeyedDeleteOutlivesItsLock: a keyed DELETE that runs longer than the
// claim's lock (the engine is slow to answer) is retried with the same key
// after the lock would have expired. The claim is renewed while the first
// attempt runs, so the retry waits for it and replays its answer instead of
// running the delete a second time.
func TestKeyedDeleteOutlivesItsLock(t *testing.T) {
	proxy := harness.NewEngineProxy(t)
	d := harness.Start(t, sandpitBin, harness.Options{
		Env:  []string{"DOCKER_HOST=" + proxy.Host},
		Args: []string{"--idempotency-lock", "1s"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := newSandbox(t, ctx, d.Client())

	del := func() (int, http.Header, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, d.URL()+"/v1/sandboxes/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+d.Token)
		req.Header.Set("Idempotency-Key", "slow-delete-"+id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header, nil
	}
	proxy.Pause()
	first := make(chan int, 1)
	go func() {
		st, _, err := del()
		if err != nil {
			t.Error(err)
		}
		first <- st
	}()
	time.Sleep(2500 * time.Millisecond) // well past the 1s lock
	retried := make(chan struct{})
	var st2 int
	var h2 http.Header
	go func() {
		defer close(retried)
		var err error
		if st2, h2, err = del(); err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	proxy.Resume()
	st1 := <-first
	<-retried
	if st1 != http.StatusNoContent || st2 != http.StatusNoContent || h2.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first delete %d, retry %d (replayed %q): want both 204, the retry replayed", st1, st2, h2.Get("Idempotent-Replayed"))
	}
	d.CheckConsistent(t)
}
