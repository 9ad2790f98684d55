package sandpit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/client"
	"github.com/sandpit-dev/sandpit/test/harness"
)

// keyed sends one request with the given Idempotency-Key values (none when
// keys is nil) and returns the answer; a transport error is returned, not
// fatal, since crash tests expect one.
func keyed(ctx context.Context, d *harness.Daemon, method, path, body string, keys ...string) (harness.Answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.URL()+path, strings.NewReader(body))
	if err != nil {
		return harness.Answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	req.Header.Set("Content-Type", "application/json")
	if keys != nil {
		req.Header["Idempotency-Key"] = keys
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return harness.Answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return harness.Answer{}, err
	}
	return harness.Answer{Status: resp.StatusCode, Body: b, Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

// mustKeyed is keyed for requests that must get an answer.
func mustKeyed(t *testing.T, ctx context.Context, d *harness.Daemon, method, path, body string, keys ...string) harness.Answer {
	t.Helper()
	a, err := keyed(ctx, d, method, path, body, keys...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return a
}

// sandboxCount is the number of sandboxes the daemon lists.
func sandboxCount(t *testing.T, ctx context.Context, d *harness.Daemon) int {
	t.Helper()
	page, _, err := d.Client().List(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(page)
}

// TestIdempotentCreateReplays: the same keyed create twice is one sandbox and
// one answer; the record is about the request, so it replays even once the
// sandbox is gone; and the key cannot be reused for another request.
func TestIdempotentCreateReplays(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	const body = `{"labels": {"suite": "idem", "n": "1"}, "env": {"A": "b"}}`

	first := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", body, "create-1")
	if first.Status != http.StatusCreated || first.Replayed || first.ID() == "" {
		t.Fatalf("first create: %d replayed=%v %s", first.Status, first.Replayed, first.Body)
	}
	id := first.ID()

	cases := []struct {
		name string
		body string
	}{
		{"same bytes", body},
		// The body is hashed in canonical form, so a client re-encoding
		// the same object sends the same request.
		{"same object re-encoded", `{"env":{"A":"b"},"labels":{"n":"1","suite":"idem"}}`},
	}
	for _, tc := range cases {
		again := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", tc.body, "create-1")
		if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) || !again.Replayed {
			t.Fatalf("%s: got %d replayed=%v %s, want the first answer replayed:\n%s", tc.name, again.Status, again.Replayed, again.Body, first.Body)
		}
	}
	if got := d.Containers(t, "sandpit.sandbox-id="+id); len(got) != 1 {
		t.Fatalf("%d containers for %s, want 1", len(got), id)
	}
	if got := d.Containers(t); len(got) != 1 {
		t.Fatalf("%d containers in all, want 1", len(got))
	}

	if err := d.Client().Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	third := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", body, "create-1")
	if third.Status != first.Status || !bytes.Equal(third.Body, first.Body) || !third.Replayed {
		t.Fatalf("after delete: got %d %s, want the original answer replayed", third.Status, third.Body)
	}
	if got := d.Containers(t); len(got) != 0 {
		t.Fatalf("the replay after delete made %d containers", len(got))
	}

	// The same key with another body is refused before anything happens.
	mismatch := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{"labels": {"suite": "other"}}`, "create-1")
	if mismatch.Status != http.StatusUnprocessableEntity || mismatch.Code() != "idempotency_key_mismatch" {
		t.Fatalf("other body, same key: %d %s, want 422 idempotency_key_mismatch", mismatch.Status, mismatch.Body)
	}
	if got := d.Containers(t); len(got) != 0 {
		t.Fatalf("the mismatched request made %d containers", len(got))
	}
	if n := sandboxCount(t, ctx, d); n != 0 {
		t.Fatalf("the mismatched request made %d sandboxes", n)
	}
}

// TestIdempotentReplayOfStoredConflict: an error answer is the outcome of the
// request too, and replays as it was, even once the conflict is gone.
func TestIdempotentReplayOfStoredConflict(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	holder := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{"name": "taken"}`)
	if holder.Status != http.StatusCreated {
		t.Fatalf("create the name holder: %d %s", holder.Status, holder.Body)
	}
	conflict := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{"name": "taken"}`, "conflict-1")
	if conflict.Status != http.StatusConflict || conflict.Code() != "name_conflict" {
		t.Fatalf("keyed create of a taken name: %d %s, want 409 name_conflict", conflict.Status, conflict.Body)
	}
	if err := d.Client().Delete(ctx, holder.ID()); err != nil {
		t.Fatal(err)
	}
	// The name is free now: without the key this create would succeed.
	again := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{"name": "taken"}`, "conflict-1")
	if again.Status != http.StatusConflict || !bytes.Equal(again.Body, conflict.Body) || !again.Replayed {
		t.Fatalf("retry of the 409: %d replayed=%v %s, want the 409 replayed", again.Status, again.Replayed, again.Body)
	}
	if got := d.Containers(t); len(got) != 0 {
		t.Fatalf("%d containers, want 0", len(got))
	}
}

// TestIdempotentConcurrentCreates: 32 creates with one key at once make one
// sandbox, and all 32 callers get the same answer.
func TestIdempotentConcurrentCreates(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	const n = 32
	answers := make([]harness.Answer, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = keyed(ctx, d, http.MethodPost, "/v1/sandboxes", `{"labels": {"suite": "concurrent"}}`, "one-key-32-callers")
		}()
	}
	close(start)
	wg.Wait()
	replayed := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if answers[i].Status != http.StatusCreated || !bytes.Equal(answers[i].Body, answers[0].Body) {
			t.Fatalf("caller %d got %d %s, caller 0 got %d %s", i, answers[i].Status, answers[i].Body, answers[0].Status, answers[0].Body)
		}
		if answers[i].Replayed {
			replayed++
		}
	}
	if replayed != n-1 {
		t.Fatalf("%d answers were replays, want %d (one caller ran the create)", replayed, n-1)
	}
	if got := d.Containers(t); len(got) != 1 {
		t.Fatalf("%d containers, want 1", len(got))
	}
	if got := sandboxCount(t, ctx, d); got != 1 {
		t.Fatalf("%d sandboxes, want 1", got)
	}
}

// TestIdempotentInFlightTimesOut: a duplicate that outwaits --idempotency-wait
// while the first attempt still runs gets 409 idempotency_key_in_flight, and
// once the first attempt is done the key replays its answer.
func TestIdempotentInFlightTimesOut(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--idempotency-wait", "1ms"}})
	ctx := ctxFor(t, 2*time.Minute)
	firstDone := make(chan harness.Answer, 1)
	go func() {
		a, err := keyed(ctx, d, http.MethodPost, "/v1/sandboxes", `{}`, "slow-1")
		if err != nil {
			t.Error(err)
		}
		firstDone <- a
	}()
	// Duplicates keep coming until the first request is answered. With a
	// 1 ms wait each one returns at once while a create runs (hundreds of
	// milliseconds: container start and agent health), whichever of the
	// requests got to run it.
	all := []harness.Answer{}
	for done := false; !done; {
		select {
		case a := <-firstDone:
			all, done = append(all, a), true
		default:
			all = append(all, mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{}`, "slow-1"))
			time.Sleep(5 * time.Millisecond)
		}
	}
	var ran []harness.Answer
	inFlight := 0
	for _, a := range all {
		switch {
		case a.Status == http.StatusConflict && a.Code() == "idempotency_key_in_flight":
			inFlight++
		case a.Status == http.StatusCreated && !a.Replayed:
			ran = append(ran, a)
		case a.Status != http.StatusCreated:
			t.Fatalf("unexpected answer %d %s", a.Status, a.Body)
		}
	}
	if len(ran) != 1 || inFlight == 0 {
		t.Fatalf("%d requests ran the create and %d got 409 in flight, of %d; want 1 and at least 1", len(ran), inFlight, len(all))
	}
	later := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{}`, "slow-1")
	if later.Status != http.StatusCreated || !bytes.Equal(later.Body, ran[0].Body) || !later.Replayed {
		t.Fatalf("after the first attempt: %d %s, want its answer replayed", later.Status, later.Body)
	}
	if got := d.Containers(t); len(got) != 1 {
		t.Fatalf("%d containers, want 1", len(got))
	}
}

// dropFirstCreate is a reverse proxy in front of the daemon that lets the
// first create reach the daemon and then, once the daemon has answered,
// drops the connection instead of passing the answer on: the client sees a
// transport error for a create that did happen.
type dropFirstCreate struct {
	proxy *httputil.ReverseProxy

	mu      sync.Mutex
	creates []http.Header // request headers of each create, in order
	answers []string      // Idempotent-Replayed of each create's answer
}

func (p *dropFirstCreate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes" {
		p.proxy.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	p.creates = append(p.creates, r.Header.Clone())
	first := len(p.creates) == 1
	p.mu.Unlock()
	rec := httptest.NewRecorder()
	p.proxy.ServeHTTP(rec, r)
	p.mu.Lock()
	p.answers = append(p.answers, rec.Header().Get("Idempotent-Replayed"))
	p.mu.Unlock()
	if first {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// TestClientRetryAfterDroppedResponse: the Go client retries a create whose
// answer was lost on the way, with the same key, and gets the sandbox the
// first attempt made: exactly one exists.
func TestClientRetryAfterDroppedResponse(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	upstream, err := url.Parse(d.URL())
	if err != nil {
		t.Fatal(err)
	}
	p := &dropFirstCreate{proxy: httputil.NewSingleHostReverseProxy(upstream)}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	c := client.New(srv.URL, d.Token, client.WithRetry(client.RetryPolicy{MaxAttempts: 4, BaseDelay: 50 * time.Millisecond, MaxDelay: 200 * time.Millisecond}))
	sb, err := c.Create(ctx, client.CreateRequest{Labels: map[string]string{"suite": "dropped"}})
	if err != nil {
		t.Fatalf("create through the dropping proxy: %v", err)
	}

	p.mu.Lock()
	creates, answers := p.creates, p.answers
	p.mu.Unlock()
	if len(creates) != 2 {
		t.Fatalf("the daemon saw %d creates, want 2 (the dropped one and the retry)", len(creates))
	}
	key := creates[0].Get("Idempotency-Key")
	if key == "" || creates[1].Get("Idempotency-Key") != key {
		t.Fatalf("Idempotency-Key %q then %q, want one generated key reused", key, creates[1].Get("Idempotency-Key"))
	}
	if answers[0] == "true" || answers[1] != "true" {
		t.Fatalf("Idempotent-Replayed %q then %q: the retry should have been a replay", answers[0], answers[1])
	}
	page, _, err := d.Client().List(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 1 || page[0].ID != sb.ID {
		t.Fatalf("sandboxes %v, want exactly %s", page, sb.ID)
	}
	if got := d.Containers(t); len(got) != 1 {
		t.Fatalf("%d containers, want 1", len(got))
	}
}

// TestCrashedKeyedCreateIsFinishedOnRetry kills the daemon at each crash
// point of a keyed create; after a restart, the retry with the same key ends
// with exactly one sandbox, under the id the crashed attempt chose, running
// and answering exec.
func TestCrashedKeyedCreateIsFinishedOnRetry(t *testing.T) {
	t.Parallel()
	cases := []struct {
		point string
		// pause is how long the retry comes after the restart: after the
		// reaper has run, so its row must still be there.
		pause time.Duration
		// lost removes the container while the daemon is down, so the
		// restart finds the finished sandbox broken (state error).
		lost bool
	}{
		{point: "after-container-create"},
		{point: "before-response", pause: 11 * time.Second},
		{point: "before-response", lost: true},
	}
	for _, tc := range cases {
		name := tc.point
		if tc.lost {
			name += "/container-lost"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A short wait makes a key left locked by the dead attempt fail
			// fast (409) instead of after 30 s.
			d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--idempotency-wait", "2s"}})
			ctx := ctxFor(t, 2*time.Minute)
			d.Stop()
			d.Restart([]string{"SANDPIT_TEST_CRASH_POINT=" + tc.point})
			const body = `{"labels": {"suite": "crash"}}`
			if a, err := keyed(ctx, d, http.MethodPost, "/v1/sandboxes", body, "crash-key"); err == nil {
				t.Fatalf("create answered %d %s; the daemon should have died", a.Status, a.Body)
			}
			if !d.Wait(30 * time.Second) {
				t.Fatal("daemon did not exit at the crash point")
			}
			half := d.Containers(t)
			if len(half) != 1 {
				t.Fatalf("%d containers after the crash, want the 1 the attempt made", len(half))
			}
			out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", `{{index .Config.Labels "sandpit.sandbox-id"}}`, half[0]).Output()
			if err != nil {
				t.Fatal(err)
			}
			chosen := strings.TrimSpace(string(out))
			if tc.lost {
				if out, err := exec.CommandContext(ctx, "docker", "rm", "-f", half[0]).CombinedOutput(); err != nil {
					t.Fatalf("docker rm: %v %s", err, out)
				}
			}

			d.Restart(nil)
			time.Sleep(tc.pause)
			retry := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", body, "crash-key")
			if retry.Status != http.StatusCreated || retry.ID() != chosen {
				t.Fatalf("retry after restart: %d %s, want 201 for %s", retry.Status, retry.Body, chosen)
			}
			page, _, err := d.Client().List(ctx, client.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) != 1 || page[0].ID != chosen || page[0].State != "running" {
				t.Fatalf("sandboxes after the retry: %+v, want %s running", page, chosen)
			}
			if got := d.Containers(t); len(got) != 1 {
				t.Fatalf("%d containers after the retry, want 1", len(got))
			}
			res, err := d.Client().Exec(ctx, chosen, client.ExecRequest{Cmd: "echo", Args: []string{"alive"}})
			if err != nil || res.Stdout != "alive\n" {
				t.Fatalf("exec in the recovered sandbox: %q %v", res.Stdout, err)
			}
			// The retry's answer is now the key's record.
			again := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", body, "crash-key")
			if !again.Replayed || !bytes.Equal(again.Body, retry.Body) {
				t.Fatalf("second retry: %d %s, want the first retry's answer replayed", again.Status, again.Body)
			}
		})
	}
}

// TestIdempotencyKeyRetention: once --idempotency-retention has passed, the
// key is new again and the create runs again.
func TestIdempotencyKeyRetention(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{Args: []string{"--idempotency-retention", "2s"}})
	ctx := ctxFor(t, 2*time.Minute)
	first := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{}`, "short-lived")
	if first.Status != http.StatusCreated {
		t.Fatalf("first create: %d %s", first.Status, first.Body)
	}
	if a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{}`, "short-lived"); !a.Replayed || a.ID() != first.ID() {
		t.Fatalf("within retention: %d %s, want a replay", a.Status, a.Body)
	}
	time.Sleep(2500 * time.Millisecond)
	second := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{}`, "short-lived")
	if second.Status != http.StatusCreated || second.Replayed || second.ID() == "" || second.ID() == first.ID() {
		t.Fatalf("past retention: %d replayed=%v %s, want a new sandbox", second.Status, second.Replayed, second.Body)
	}
	if got := d.Containers(t); len(got) != 2 {
		t.Fatalf("%d containers, want 2", len(got))
	}
}

// TestInvalidIdempotencyKeys: a key that is not one header of 1-255 printable
// ASCII characters is refused with 400, and nothing is created.
func TestInvalidIdempotencyKeys(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, time.Minute)
	cases := []struct {
		name string
		keys []string
	}{
		{"empty", []string{""}},
		{"256 characters", []string{strings.Repeat("k", 256)}},
		{"tab", []string{"a\tb"}},
		{"non-ASCII", []string{"caf\u00e9"}},
		{"two headers", []string{"one", "two"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{}`, tc.keys...)
			if a.Status != http.StatusBadRequest || a.Code() != "invalid_idempotency_key" {
				t.Fatalf("got %d %s, want 400 invalid_idempotency_key", a.Status, a.Body)
			}
		})
	}
	if got := d.Containers(t); len(got) != 0 {
		t.Fatalf("invalid keys made %d containers", len(got))
	}
	if n := sandboxCount(t, ctx, d); n != 0 {
		t.Fatalf("invalid keys made %d sandboxes", n)
	}
	// The longest and the oddest valid keys are taken (a delete of a
	// missing sandbox keeps this cheap: 404, not 400).
	for _, k := range []string{strings.Repeat("k", 255), "~!@#$%^&*()_+ {}|:<>?"} {
		if a := mustKeyed(t, ctx, d, http.MethodDelete, "/v1/sandboxes/sbnope", "", k); a.Status != http.StatusNotFound {
			t.Fatalf("valid key %q: %d %s, want 404", k, a.Status, a.Body)
		}
	}
}

// TestRequestsWithoutKeyAreUnchanged: without the header nothing is
// deduplicated or replayed.
func TestRequestsWithoutKeyAreUnchanged(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	a := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{}`)
	b := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{}`)
	if a.Status != http.StatusCreated || b.Status != http.StatusCreated || a.ID() == b.ID() || a.Replayed || b.Replayed {
		t.Fatalf("two unkeyed creates: %d %s and %d %s, want two sandboxes", a.Status, a.Body, b.Status, b.Body)
	}
	if got := d.Containers(t); len(got) != 2 {
		t.Fatalf("%d containers, want 2", len(got))
	}
	for range 2 {
		if del := mustKeyed(t, ctx, d, http.MethodDelete, "/v1/sandboxes/"+a.ID(), ""); del.Replayed {
			t.Fatal("an unkeyed delete was replayed")
		}
	}
	if del := mustKeyed(t, ctx, d, http.MethodDelete, "/v1/sandboxes/"+a.ID(), ""); del.Status != http.StatusNotFound {
		t.Fatalf("unkeyed delete of a deleted sandbox: %d, want 404", del.Status)
	}
}

// TestIdempotencyKeyOnOtherRoutes: the key works on every mutating route
// (ports, custom domains, stop, start, delete), each route being its own
// scope, and exec is left out: a keyed exec runs every time.
func TestIdempotencyKeyOnOtherRoutes(t *testing.T) {
	t.Parallel()
	d := harness.Start(t, sandpitBin, harness.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	sb := mustKeyed(t, ctx, d, http.MethodPost, "/v1/sandboxes", `{}`)
	if sb.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", sb.Status, sb.Body)
	}
	base := "/v1/sandboxes/" + sb.ID()

	// Exec is not keyed: the command runs twice.
	for i, want := range []string{"1", "2"} {
		a := mustKeyed(t, ctx, d, http.MethodPost, base+"/exec", `{"cmd": "sh", "args": ["-c", "echo x >> /tmp/n; wc -l < /tmp/n"]}`, "shared")
		var res struct{ Stdout string }
		_ = json.Unmarshal(a.Body, &res)
		if a.Replayed || strings.TrimSpace(res.Stdout) != want {
			t.Fatalf("keyed exec %d: replayed=%v %s, want the command run again", i+1, a.Replayed, a.Body)
		}
	}

	// Each step is sent twice with one key; the second is the first's
	// answer replayed, where an unkeyed repeat would answer differently
	// (200 "reused" for the expose, 200 for the domain, 404 for the
	// deletes).
	steps := []struct {
		name, method, path, body string
		status                   int
	}{
		{"expose", http.MethodPost, base + "/ports", `{"port": 8080}`, http.StatusCreated},
		{"add domain", http.MethodPost, base + "/custom-domains", `{"hostname": "app.example.test", "port": 8080}`, http.StatusCreated},
		{"remove domain", http.MethodDelete, base + "/custom-domains/app.example.test", ``, http.StatusNoContent},
		{"unexpose", http.MethodDelete, base + "/ports/8080", ``, http.StatusNoContent},
		{"stop", http.MethodPost, base + "/stop", ``, http.StatusOK},
		{"start", http.MethodPost, base + "/start", ``, http.StatusOK},
		{"delete", http.MethodDelete, base, ``, http.StatusNoContent},
	}
	for _, st := range steps {
		// "shared" was used on exec and is reused on every route: the
		// scope is the route, so no mismatch.
		first := mustKeyed(t, ctx, d, st.method, st.path, st.body, "shared")
		if first.Status != st.status || first.Replayed {
			t.Fatalf("%s: %d replayed=%v %s, want %d", st.name, first.Status, first.Replayed, first.Body, st.status)
		}
		again := mustKeyed(t, ctx, d, st.method, st.path, st.body, "shared")
		if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) || !again.Replayed {
			t.Fatalf("%s again: %d replayed=%v %s, want %d %s replayed", st.name, again.Status, again.Replayed, again.Body, first.Status, first.Body)
		}
	}
	if got := d.Containers(t); len(got) != 0 {
		t.Fatalf("%d containers after the keyed delete, want 0", len(got))
	}
}
